"""The HTTP API (docs/api.md, docs/openapi.yaml): ingest, the dead letter, queries, internal calls, health and metrics.

Handlers that touch the database run in Starlette's thread pool (the stores are synchronous); only
body reading is async. A store that cannot be reached answers 503 with nothing half-written.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tally_pipeline.api.auth import ANONYMOUS_LOCAL, Principal, TokenBook
from tally_pipeline.api.bodies import BadBody, BodyTooLarge, events_of, parse_json, raw_text, read_limited
from tally_pipeline.api.metrics import ApiMetrics
from tally_pipeline.api.quota import DEFAULT_PER_MINUTE, DeadLetterQuota
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.ingest import MAX_BATCH, BatchOutcome, BodyItemTexts, Ingestor
from tally_pipeline.store.base import RejectedRow, Store, StoreBusy, StoreUnavailable

log = logging.getLogger("tally.api")

DEFAULT_MAX_BODY = 5 * 1024 * 1024
Handler = Callable[[Request], Awaitable[Response]]


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, default=_json_default, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC)
        except orjson.JSONEncodeError:
            # PostgreSQL's jsonb keeps numbers as numeric and hands 1e300 back as a 301-digit integer,
            # which orjson cannot write; the standard library can (the same number, spelled out).
            return json.dumps(content, default=_json_default, ensure_ascii=False, separators=(",", ":")).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def error(status: int, code: str, detail: str | None = None, **extra: Any) -> JSON:
    body: dict[str, Any] = {"error": code}
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSON(body, status_code=status, headers=headers)


@dataclass
class ApiContext:
    """Everything the handlers use; built by ``tally serve`` or by a test."""

    store: Store
    ingestor: Ingestor
    tokens: TokenBook | None = None  # None: no tokens file, anonymous loopback use only
    max_body_bytes: int = DEFAULT_MAX_BODY
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    runtime: Any = None  # the Runtime, for calls that need the configuration (a sync)
    dead_letter_quota: DeadLetterQuota | None = None  # None: from the runtime's configuration (or the default)

    def __post_init__(self) -> None:
        if self.dead_letter_quota is None:
            per_minute = DEFAULT_PER_MINUTE
            if self.runtime is not None:
                per_minute = self.runtime.config.dead_letter.max_bytes_per_minute
            self.dead_letter_quota = DeadLetterQuota(per_minute)


class ApiError(Exception):
    def __init__(self, response: JSON):
        self.response = response


def principal_of(ctx: ApiContext, request: Request) -> Principal:
    if ctx.tokens is None:
        return ANONYMOUS_LOCAL
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(error(401, "unauthorized", "missing bearer token (Authorization: Bearer TOKEN)"))
    principal = ctx.tokens.authenticate(token.strip())
    if principal is None:
        raise ApiError(error(401, "unauthorized", "unknown token"))
    return principal


def require(principal: Principal, scope: str) -> None:
    if not principal.has(scope):
        raise ApiError(error(403, "forbidden", f"this token lacks the {scope!r} scope"))


def guarded(handler: Callable[[ApiContext, Request], Awaitable[Response]], ctx: ApiContext) -> Handler:
    """Turn the store's and the handler's own errors into the contract's answers."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(ctx, request)
        except ApiError as exc:
            return exc.response
        except (StoreUnavailable, StoreBusy) as exc:
            log.warning("store unavailable: %s", exc)
            ctx.metrics.store_errors += 1
            return error(503, "store_unavailable", str(exc))

    return endpoint


def _dead_letter_body(ctx: ApiContext, reason: str, message: str, raw: str | None) -> None:
    ctx.ingestor.dead_letter([RejectedRow(reason, message, "api", raw)])


def _within_quota(ctx: ApiContext, principal: Principal) -> None:
    """Refuse a writer whose token has dead-lettered more than its rate allows (429, nothing read)."""
    assert ctx.dead_letter_quota is not None
    wait = ctx.dead_letter_quota.retry_after(principal.name)
    if wait is not None:
        ctx.metrics.count_request_rejected("dead_letter_quota")
        response = error(429, "dead_letter_quota",
                         f"this token dead-lettered more than {ctx.dead_letter_quota.per_minute} bytes a minute; "
                         "fix the rejected items before sending more", retry_after=wait)
        response.headers["Retry-After"] = str(wait)
        raise ApiError(response)


def _charge(ctx: ApiContext, principal: Principal, amount: int) -> None:
    assert ctx.dead_letter_quota is not None
    ctx.dead_letter_quota.charge(principal.name, amount)


async def _read_json(ctx: ApiContext, request: Request, principal: Principal) -> tuple[Any, bytes]:
    """The parsed body and its bytes (the dead letter keeps an item's text as received)."""
    try:
        body = await read_limited(request, ctx.max_body_bytes)
    except BodyTooLarge as exc:
        ctx.metrics.count_request_rejected("body_too_large")
        raise ApiError(error(413, "body_too_large", f"request body exceeds {exc.limit} bytes", max_bytes=exc.limit)) from None
    try:
        return parse_json(body), body
    except BadBody as bad:
        await run_in_threadpool(_dead_letter_body, ctx, bad.error, f"{bad.error}: {bad.detail}", raw_text(body))
        _charge(ctx, principal, len(body))
        ctx.metrics.count_request_rejected(bad.error)
        raise ApiError(error(400, bad.error, bad.detail)) from None


async def post_events(ctx: ApiContext, request: Request) -> Response:
    principal = principal_of(ctx, request)
    if not principal.may_ingest_any():
        raise ApiError(error(403, "forbidden", "this token has no ingest scope"))
    _within_quota(ctx, principal)
    parsed, body = await _read_json(ctx, request, principal)
    try:
        items = events_of(parsed)
    except BadBody as bad:
        await run_in_threadpool(_dead_letter_body, ctx, bad.error, f"{bad.error}: {bad.detail}", raw_text(body))
        _charge(ctx, principal, len(body))
        ctx.metrics.count_request_rejected(bad.error)
        raise ApiError(error(400, bad.error, bad.detail)) from None
    if len(items) > MAX_BATCH:
        ctx.metrics.count_request_rejected("batch_too_large")
        return error(413, "batch_too_large", f"{len(items)} events in one batch", max=MAX_BATCH)
    outcome: BatchOutcome = await run_in_threadpool(
        ctx.ingestor.ingest, items, origin="api", may_write=principal.may_ingest, raw_of=BodyItemTexts(body, items)
    )
    _charge(ctx, principal, outcome.dead_letter_bytes)
    ctx.metrics.count_outcome(outcome)
    return JSON(outcome.as_json())


async def post_event(ctx: ApiContext, request: Request) -> Response:
    principal = principal_of(ctx, request)
    if not principal.may_ingest_any():
        raise ApiError(error(403, "forbidden", "this token has no ingest scope"))
    _within_quota(ctx, principal)
    item, body = await _read_json(ctx, request, principal)
    outcome: BatchOutcome = await run_in_threadpool(
        ctx.ingestor.ingest, [item], origin="api", may_write=principal.may_ingest, raw_of=lambda _: raw_text(body)
    )
    _charge(ctx, principal, outcome.dead_letter_bytes)
    ctx.metrics.count_outcome(outcome)
    result = outcome.results[0]
    body = result.as_json()
    body.pop("index", None)
    status = {"stored": 201, "duplicate": 200, "rejected": 400}[result.status]
    return JSON(body, status_code=status)


def encode_cursor(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def decode_cursor(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued")) from None
    if not isinstance(value, dict):
        raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued"))
    return value


def query_limit(request: Request, default: int = 100, maximum: int = 1000) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= maximum:
        raise ApiError(error(400, "invalid_parameter", f"limit must be an integer from 1 to {maximum}"))
    return int(text)


def checked_text(value: str, name: str) -> str:
    """A query or path parameter bound into SQL: PostgreSQL text cannot hold NUL, and nothing stored does."""
    if "\x00" in value:
        raise ApiError(error(400, "invalid_parameter", f"{name} must not contain the NUL character"))
    return value


def query_text(request: Request, name: str) -> str | None:
    """A text filter; absent or empty means no filter."""
    value = request.query_params.get(name)
    return checked_text(value, name) if value else None


def query_instant(request: Request, name: str) -> datetime | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        return parse_rfc3339(text)
    except TimestampError as exc:
        raise ApiError(error(400, "invalid_parameter", f"{name}: {exc}")) from None


async def get_rejected(ctx: ApiContext, request: Request) -> Response:
    require(principal_of(ctx, request), "read")
    limit = query_limit(request)
    since = query_instant(request, "since")
    cursor = request.query_params.get("cursor")
    before = None
    if cursor:
        before = decode_cursor(cursor).get("before")
        if not isinstance(before, int) or isinstance(before, bool):
            raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued"))
    entries = await run_in_threadpool(
        ctx.store.rejected,
        cloud=query_text(request, "cloud"),
        reason=query_text(request, "reason"),
        since=since,
        before_id=before,
        limit=limit + 1,
    )
    page = entries[:limit]
    next_cursor = encode_cursor({"before": page[-1].id}) if len(entries) > limit else None
    return JSON(
        {
            "rejected": [
                {
                    "id": e.id,
                    "received_at": e.received_at,
                    "reason": e.reason,
                    "message": e.message,
                    "origin": e.origin,
                    "cloud": e.cloud,
                    "event_id": e.event_id,
                    "raw": e.raw,
                    "raw_bytes": e.raw_bytes,
                    "raw_truncated": e.raw_truncated,
                    "raw_url": None if e.raw is None else f"/v1/rejected/{e.id}/raw",
                    "repeats": e.repeats,
                    "last_received_at": e.last_received_at,
                }
                for e in page
            ],
            "next_cursor": next_cursor,
        }
    )


_ROW_ID_MAX = 2**63 - 1


async def get_rejected_raw(ctx: ApiContext, request: Request) -> Response:
    """One dead-letter row's whole raw item, as text: listings carry only a bounded prefix."""
    require(principal_of(ctx, request), "read")
    rejected_id = request.path_params["rejected_id"]
    found, raw = (False, None)
    if rejected_id <= _ROW_ID_MAX:
        found, raw = await run_in_threadpool(ctx.store.rejected_raw, rejected_id)
    if not found:
        raise ApiError(error(404, "not_found", f"no dead-letter row {rejected_id}"))
    if raw is None:
        raise ApiError(error(404, "not_found", f"dead-letter row {rejected_id} holds no raw item"))
    return Response(raw, media_type="text/plain; charset=utf-8")


async def healthz(ctx: ApiContext, request: Request) -> Response:
    try:
        await run_in_threadpool(ctx.store.ping)
    except (StoreUnavailable, StoreBusy) as exc:
        return error(503, "store_unavailable", str(exc))
    return JSON({"status": "ok", "database": ctx.store.dialect})


async def metrics(ctx: ApiContext, request: Request) -> Response:
    clouds = sorted(ctx.runtime.config.clouds) if ctx.runtime is not None else []
    text = await run_in_threadpool(ctx.metrics.render, ctx.store, clouds)
    return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")


async def _routing_error(request: Request, exc: Exception) -> Response:
    """No route for the path (404) or the method (405): answered in JSON like every other error."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSON({"error": code, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


class AnyPath(Convertor[str]):
    """Like Starlette's ``path``, but matching every character: a resource id may hold a newline."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", AnyPath())


def create_app(ctx: ApiContext) -> Starlette:
    from tally_pipeline.api import resources

    resource = "/v1/resources/{cloud}/{resource_type}/{resource_id:anypath}"
    routes = [
        Route("/v1/events", guarded(post_events, ctx), methods=["POST"]),
        Route("/v1/event", guarded(post_event, ctx), methods=["POST"]),
        Route("/v1/rejected", guarded(get_rejected, ctx), methods=["GET"]),
        Route("/v1/rejected/{rejected_id:int}/raw", guarded(get_rejected_raw, ctx), methods=["GET"]),
        Route(f"{resource}/events", guarded(resources.resource_events, ctx), methods=["GET"]),
        Route(f"{resource}/lifecycle", guarded(resources.resource_lifecycle, ctx), methods=["GET"]),
        Route("/v1/inventory", guarded(resources.get_inventory, ctx), methods=["GET"]),
        Route("/internal/sync/{cloud}", guarded(resources.post_sync, ctx), methods=["POST"]),
        Route("/healthz", guarded(healthz, ctx), methods=["GET"]),
        Route("/metrics", guarded(metrics, ctx), methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _routing_error})
    app.state.ctx = ctx
    return app
