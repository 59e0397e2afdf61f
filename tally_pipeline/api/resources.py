"""Query endpoints: a resource's history and lifecycle, and the inventory (read scope)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tally_pipeline.api.http import (
    JSON,
    ApiContext,
    ApiError,
    checked_text,
    decode_cursor,
    encode_cursor,
    error,
    principal_of,
    query_instant,
    query_limit,
    query_text,
    require,
)
from tally_pipeline.services import queries


def _key(request: Request) -> tuple[str, str, str]:
    p = request.path_params
    return (checked_text(p["cloud"], "cloud"), checked_text(p["resource_type"], "resource_type"),
            checked_text(p["resource_id"], "resource_id"))


def _not_found(key: tuple[str, str, str]) -> ApiError:
    cloud, rtype, rid = key
    return ApiError(error(404, "not_found", f"no events for resource {rtype} {rid!r} in cloud {cloud!r}"))


async def resource_events(ctx: ApiContext, request: Request) -> Response:
    require(principal_of(ctx, request), "read")
    key = _key(request)
    events = await run_in_threadpool(queries.history, ctx.store, *key)
    if events is None:
        raise _not_found(key)
    for event in events:
        event.pop("seq", None)
    return JSON({"events": events})


async def resource_lifecycle(ctx: ApiContext, request: Request) -> Response:
    require(principal_of(ctx, request), "read")
    key = _key(request)
    intervals = await run_in_threadpool(queries.lifecycle, ctx.store, *key)
    if intervals is None:
        raise _not_found(key)
    state = await run_in_threadpool(queries.resource_state, ctx.store, *key)
    return JSON({"intervals": intervals, "state": state})


async def get_inventory(ctx: ApiContext, request: Request) -> Response:
    require(principal_of(ctx, request), "read")
    params = request.query_params
    as_of = query_instant(request, "as_of")
    limit = query_limit(request)
    filters = {name: query_text(request, name) for name in ("cloud", "resource_type", "project_id")}
    after = None
    if params.get("cursor"):
        value = decode_cursor(params["cursor"]).get("after")
        if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, str) and "\x00" not in v for v in value)):
            raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued"))
        after = (value[0], value[1], value[2])
    page = await run_in_threadpool(
        lambda: queries.inventory(
            ctx.store,
            cloud=filters["cloud"],
            resource_type=filters["resource_type"],
            project_id=filters["project_id"],
            as_of=as_of,
            after=after,
            limit=limit,
        )
    )
    next_cursor = encode_cursor({"after": list(page.next_key)}) if page.next_key else None
    return JSON({"resources": page.resources, "next_cursor": next_cursor})

