"""The HTTP API (docs/api.md, docs/openapi.yaml): ingest, the dead letter, queries, internal calls, health and metrics.

Handlers that touch the database run in Starlette's thread pool (the stores are synchronous); only
body reading is async. A store that cannot be reached answers 503 with nothing half-written.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tally_pipeline.api import resources, sync_routes, usage_routes
from tally_pipeline.api.auth import Principal
from tally_pipeline.api.bodies import (
    BadBody,
    BodyTooLarge,
    drain,
    drain_limit,
    events_of,
    parse_json,
    raw_text,
    read_limited,
)
from tally_pipeline.api.http import (  # noqa: F401  (re-exported: tests and the server build contexts from here)
    DEFAULT_MAX_BODY,
    JSON,
    ApiContext,
    ApiError,
    decode_cursor,
    encode_cursor,
    error,
    known_clouds,
    metric_clouds,
    principal_of,
    query_instant,
    query_limit,
    query_text,
    require,
)
from tally_pipeline.api.metrics import CONTENT_TYPE, store_families
from tally_pipeline.redaction import MASK, mask_credentials, redact
from tally_pipeline.services.errors import StoreBusy, StoreUnavailable, SyncInProgress, UnknownCloud
from tally_pipeline.services.ingest import MAX_BATCH, BatchOutcome, BodyItemTexts
from tally_pipeline.store.base import RejectedRow

log = logging.getLogger("tally.api")

Handler = Callable[[Request], Awaitable[Response]]


async def _refuse_body(ctx: ApiContext, request: Request, principal: Principal, bad: BadBody, body: bytes) -> NoReturn:
    """Answer 400 to a body refused whole, once it is in the dead letter and charged to the token."""
    await _dead_letter_refused_body(ctx, request, bad, body)
    _charge(ctx, principal, len(body))
    ctx.metrics.count_request_rejected(bad.error)
    raise ApiError(error(400, bad.error, bad.detail)) from None


async def _dead_letter_refused_body(ctx: ApiContext, request: Request, bad: BadBody, body: bytes) -> None:
    """Keep a body refused whole (400) in the dead letter. Its text is built in the thread pool with the
    write: decoding, escaping and masking are proportional to the body (0.7 s of CPU for 5 MiB of
    random bytes), which on the event loop would hold every other request, ``/healthz`` included."""
    _, _, presented = request.headers.get("authorization", "").partition(" ")
    await run_in_threadpool(_dead_letter_body, ctx, bad.error, f"{bad.error}: {bad.detail}", body,
                            presented.strip())


def _dead_letter_body(ctx: ApiContext, reason: str, message: str, body: bytes, presented: str) -> None:
    ctx.ingestor.dead_letter([RejectedRow(reason, message, "api", _without_credentials(raw_text(body), presented))])


def _without_credentials(raw: str, presented: str) -> str:
    """A refused body as the dead letter keeps it, minus any credential in it.

    A client whose ``Content-Length`` overstates its body makes its next request, headers and all,
    the rest of this body; the bearer token in that ``Authorization`` header (``presented``, this
    request's own) must not be stored.
    """
    clean = mask_credentials(raw)
    return clean.replace(presented, MASK) if len(presented) >= 8 else clean


async def _within_quota(ctx: ApiContext, request: Request, principal: Principal) -> None:
    """Refuse a writer whose token has dead-lettered more than its rate allows (429, nothing kept).

    The body is read and dropped first (up to a bound), so that the client, still sending, can read
    the answer and its ``Retry-After`` instead of a reset connection.
    """
    assert ctx.dead_letter_quota is not None
    wait = ctx.dead_letter_quota.retry_after(principal.name)
    if wait is not None:
        ctx.metrics.count_request_rejected("dead_letter_quota")
        response = error(429, "dead_letter_quota",
                         f"this token dead-lettered more than {ctx.dead_letter_quota.per_minute} bytes a minute; "
                         "fix the rejected items before sending more", retry_after=wait)
        response.headers["Retry-After"] = str(wait)
        if not await drain(request, drain_limit(ctx.max_body_bytes)):
            response.headers["Connection"] = "close"
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
        # What it cost to refuse is charged like a dead-lettered body: a client looping oversized
        # bodies meets the same 429 as one looping bad items.
        _charge(ctx, principal, exc.limit)
        refusal = error(413, "body_too_large", f"request body exceeds {exc.limit} bytes", max_bytes=exc.limit)
        # Close after answering: the body was drained up to a bound (so the client can read this), and
        # a body larger than that is left unread.
        refusal.headers["Connection"] = "close"
        raise ApiError(refusal) from None
    try:
        # Parsing is CPU: in a worker thread, a bounded number at a time, never on the event loop.
        return await run_in_threadpool(_parse_bounded, ctx, body), body
    except BadBody as bad:
        await _refuse_body(ctx, request, principal, bad, body)


def _parse_bounded(ctx: ApiContext, body: bytes) -> Any:
    with ctx.parse_slots:
        return parse_json(body)


async def post_events(ctx: ApiContext, request: Request) -> Response:
    principal = principal_of(ctx, request)
    if not principal.may_ingest_any():
        raise ApiError(error(403, "forbidden", "this token has no ingest scope"))
    await _within_quota(ctx, request, principal)
    parsed, body = await _read_json(ctx, request, principal)
    try:
        items = events_of(parsed)  # a look at the top level only: cheap
    except BadBody as bad:
        await _refuse_body(ctx, request, principal, bad, body)
    if len(items) > MAX_BATCH:
        ctx.metrics.count_request_rejected("batch_too_large")
        return error(413, "batch_too_large", f"{len(items)} events in one batch", max=MAX_BATCH)
    outcome: BatchOutcome = await run_in_threadpool(
        ctx.ingestor.ingest, items, origin="api", may_write=principal.may_ingest, raw_of=BodyItemTexts(body, items)
    )
    _charge(ctx, principal, outcome.dead_letter_bytes)
    ctx.metrics.count_outcome(outcome, metric_clouds(ctx, principal))
    return JSON(outcome.as_json())


async def post_event(ctx: ApiContext, request: Request) -> Response:
    principal = principal_of(ctx, request)
    if not principal.may_ingest_any():
        raise ApiError(error(403, "forbidden", "this token has no ingest scope"))
    await _within_quota(ctx, request, principal)
    item, body = await _read_json(ctx, request, principal)
    outcome: BatchOutcome = await run_in_threadpool(
        ctx.ingestor.ingest, [item], origin="api", may_write=principal.may_ingest, raw_of=lambda _: raw_text(body)
    )
    _charge(ctx, principal, outcome.dead_letter_bytes)
    ctx.metrics.count_outcome(outcome, metric_clouds(ctx, principal))
    result = outcome.results[0]
    answer = result.as_json()
    answer.pop("index", None)
    status = {"stored": 201, "duplicate": 200, "rejected": 400}[result.status]
    return JSON(answer, status_code=status)


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


#: Characters of a raw item read from the store at a time: a reader holds one slice, not the item.
RAW_SLICE_CHARS = 256 * 1024


async def get_rejected_raw(ctx: ApiContext, request: Request) -> Response:
    """One dead-letter row's raw item, as text, up to the API's body limit: listings carry only a
    bounded prefix. Streamed a slice at a time, so readers of a large row never hold it whole."""
    require(principal_of(ctx, request), "read")
    rejected_id = request.path_params["rejected_id"]
    found, size = (False, None)
    if rejected_id <= _ROW_ID_MAX:
        found, size = await run_in_threadpool(ctx.store.rejected_raw_size, rejected_id)
    if not found:
        raise ApiError(error(404, "not_found", f"no dead-letter row {rejected_id}"))
    if size is None:
        raise ApiError(error(404, "not_found", f"dead-letter row {rejected_id} holds no raw item"))
    cap = ctx.max_body_bytes
    headers = {"X-Raw-Bytes": str(size), "X-Raw-Truncated": "true" if size > cap else "false"}
    return StreamingResponse(_raw_slices(ctx, rejected_id, cap), media_type="text/plain; charset=utf-8",
                             headers=headers)


async def _raw_slices(ctx: ApiContext, rejected_id: int, cap: int) -> AsyncIterator[bytes]:
    """The raw item's UTF-8 bytes, slice by slice, ending at ``cap`` bytes (on a character boundary)."""
    sent, start = 0, 0
    while sent < cap:
        part = await run_in_threadpool(ctx.store.rejected_raw_part, rejected_id, start, RAW_SLICE_CHARS)
        if not part:
            return
        data = part.encode("utf-8", errors="backslashreplace")
        if sent + len(data) > cap:
            data = data[: cap - sent].decode("utf-8", errors="ignore").encode("utf-8")  # whole characters only
            yield data
            return
        yield data
        sent += len(data)
        start += len(part)


async def healthz(ctx: ApiContext, request: Request) -> Response:
    try:
        await run_in_threadpool(ctx.store.ping)
    except (StoreUnavailable, StoreBusy) as exc:
        return error(503, "store_unavailable", redact(str(exc)))
    return JSON({"status": "ok", "database": ctx.store.dialect})


#: How long ``/metrics`` waits for the store's gauges before answering without them. A scrape times
#: out after 10 s by default, and a store that is down holds a request for its pool timeout (10 s).
METRICS_STORE_DEADLINE = 3.0


async def metrics(ctx: ApiContext, request: Request) -> Response:
    clouds = sorted(ctx.runtime.config.clouds) if ctx.runtime is not None else []
    known = known_clouds(ctx)
    gauges: list[Any] | None = None
    try:
        with anyio.fail_after(METRICS_STORE_DEADLINE):
            # abandoned on timeout: the thread finishes its wait for the pool on its own
            gauges = await anyio.to_thread.run_sync(lambda: store_families(ctx.store, clouds, known), abandon_on_cancel=True)
    except (StoreUnavailable, StoreBusy, TimeoutError) as exc:
        log.warning("/metrics without the store's gauges: %s", redact(str(exc)) or "no answer in time")
    return Response(ctx.metrics.render(gauges), headers={"content-type": CONTENT_TYPE})


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


def _bound(handler: Callable[[ApiContext, Request], Awaitable[Response]], ctx: ApiContext) -> Handler:
    async def endpoint(request: Request) -> Response:
        return await handler(ctx, request)

    return endpoint


# The contract's answers to the errors a handler raises, in one place (Starlette's exception_handlers)
# rather than a try/except around every route.

async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    # The client went away (or was cut off by the body deadline) before its body was read:
    # nothing was stored, and nobody is left to answer. One line, not a traceback.
    log.info("%s %s: client disconnected before its body was read", request.method, request.url.path)
    request.app.state.ctx.metrics.count_request_rejected("client_disconnected")
    return error(400, "client_disconnected")


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    detail = redact(str(exc))
    log.warning("store unavailable: %s", detail)
    request.app.state.ctx.metrics.count_store_error()
    return error(503, "store_unavailable", detail)


async def _unknown_cloud(request: Request, exc: Exception) -> Response:
    return error(404, "unknown_cloud", str(exc))


async def _sync_in_progress(request: Request, exc: Exception) -> Response:
    return error(409, "sync_in_progress", str(exc))


def create_app(ctx: ApiContext) -> Starlette:
    resource = "/v1/resources/{cloud}/{resource_type}/{resource_id:anypath}"
    routes = [
        Route("/v1/events", _bound(post_events, ctx), methods=["POST"]),
        Route("/v1/event", _bound(post_event, ctx), methods=["POST"]),
        Route("/v1/rejected", _bound(get_rejected, ctx), methods=["GET"]),
        Route("/v1/rejected/{rejected_id:int}/raw", _bound(get_rejected_raw, ctx), methods=["GET"]),
        Route(f"{resource}/events", _bound(resources.resource_events, ctx), methods=["GET"]),
        Route(f"{resource}/lifecycle", _bound(resources.resource_lifecycle, ctx), methods=["GET"]),
        Route("/v1/inventory", _bound(resources.get_inventory, ctx), methods=["GET"]),
        Route("/v1/usage", _bound(usage_routes.get_usage, ctx), methods=["GET"]),
        Route("/v1/usage/{cloud}/{project_id}/current", _bound(usage_routes.get_current_usage, ctx), methods=["GET"]),
        Route("/v1/statements/{cloud}/{month}", _bound(usage_routes.get_statement, ctx), methods=["GET"]),
        Route("/internal/sync/{cloud}", _bound(sync_routes.post_sync, ctx), methods=["POST"]),
        Route("/internal/sync/{cloud}/runs/{run_id}", _bound(sync_routes.get_sync_run, ctx), methods=["GET"]),
        Route("/healthz", _bound(healthz, ctx), methods=["GET"]),
        Route("/metrics", _bound(metrics, ctx), methods=["GET"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: _routing_error,
        ApiError: _api_error,
        ClientDisconnect: _client_disconnected,
        StoreUnavailable: _store_unavailable,
        StoreBusy: _store_unavailable,
        UnknownCloud: _unknown_cloud,
        SyncInProgress: _sync_in_progress,
    }
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=sync_routes.lifespan(ctx))
    # Starlette answers a path with one slash too many or too few by a 307 to the same URL built from
    # the caller's Host header, before any auth check: a path either matches a route or is a 404.
    app.router.redirect_slashes = False
    app.state.ctx = ctx
    return app
