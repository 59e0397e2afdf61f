"""Reconciliation on request (admin scope): ``POST /internal/sync/{cloud}`` starts a run and answers at
once (202, ``Location`` of the run); ``GET /internal/sync/{cloud}/runs/{run_id}`` follows it.

The run is reserved in the database before the answer (``sync_launch``), so ``409`` and
``Idempotency-Key`` hold across API processes and replicas; it runs on this process's sync workers,
or as a Dagster run when the config names a Dagster webserver. ``?wait=SECONDS`` (at most
``MAX_WAIT``) holds the answer until the run has finished.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tally_pipeline.api.http import JSON, ApiContext, ApiError, checked_text, error, principal_of, require
from tally_pipeline.services.errors import ShuttingDown, SyncInProgress
from tally_pipeline.services.reconciliation import leases_of
from tally_pipeline.services.reconciliation_launch import FINISHED, LocalExecutor, SyncLauncher

#: The longest ``?wait`` in seconds: below the read timeout of the shipped proxy (deploy/proxy, 120 s)
#: and of most load balancers, so a waiting caller gets its answer, not a gateway timeout.
MAX_WAIT = 60
#: Idempotency-Key: printable ASCII, as long as a UUID or a Kubernetes Job name needs and then some.
MAX_KEY_LENGTH = 255

_building = threading.Lock()


def launcher_of(ctx: ApiContext) -> SyncLauncher:
    """The context's launcher, built on first use from its runtime's configuration."""
    with _building:
        if ctx.syncs is None:
            ctx.syncs = build_launcher(ctx)
        return ctx.syncs


def build_launcher(ctx: ApiContext) -> SyncLauncher:
    runtime = ctx.runtime
    settings = runtime.config
    leases = leases_of(settings.reconciliation.lock_lease)
    if settings.dagster is not None:
        from tally_pipeline.orchestration.launch import DagsterSyncExecutor

        return SyncLauncher(ctx.store, DagsterSyncExecutor(settings.dagster), leases)

    def run(cloud: str, run_id: str) -> Any:
        from tally_pipeline.services.reconciliation_launch import run_key_of

        return runtime.sync(cloud, run_id=run_id, run_key=run_key_of(run_id))

    # An embedded DuckDB file takes one writer: its syncs run one at a time (two at once in one process
    # have also failed inside DuckDB's Python client, "python_arrow_scan does not exist").
    workers = settings.api.sync_workers if ctx.store.parallel_writes else 1
    executor = LocalExecutor(run, ctx.store, workers=workers, grace=settings.api.sync_shutdown_grace)
    return SyncLauncher(ctx.store, executor, leases)


def lifespan(ctx: ApiContext) -> Callable[[Any], Any]:
    """The app's lifespan: on shutdown, the sync workers stop (see ``LocalExecutor.close``)."""

    @asynccontextmanager
    async def span(app: Any) -> AsyncIterator[None]:
        yield
        if ctx.syncs is not None:
            await anyio.to_thread.run_sync(ctx.syncs.close)

    return span


def _configured(ctx: ApiContext) -> Any:
    if ctx.runtime is None:
        raise ApiError(error(404, "not_found", "this API has no clouds configured"))
    return ctx.runtime


def _wait_seconds(request: Request) -> int:
    text = request.query_params.get("wait")
    if text is None or text == "":
        return 0
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_WAIT))) or int(text) > MAX_WAIT:
        raise ApiError(error(400, "invalid_parameter", f"wait must be an integer number of seconds from 0 to {MAX_WAIT}"))
    return int(text)


def _idempotency_key(request: Request) -> str | None:
    values = request.headers.getlist("idempotency-key")
    if not values:
        return None
    key = values[0]
    if len(values) > 1 or not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in key):
        raise ApiError(error(400, "invalid_header",
                             f"Idempotency-Key must be one header of 1 to {MAX_KEY_LENGTH} printable ASCII characters"))
    return key


def run_location(cloud: str, run_id: str) -> str:
    return f"/internal/sync/{cloud}/runs/{run_id}"


async def _read(launcher: SyncLauncher, run_id: str, wait: int) -> dict[str, Any] | None:
    """The run's row; with ``wait``, once it has finished or ``wait`` seconds have passed."""
    deadline = anyio.current_time() + wait
    pause = 0.05
    while True:
        row = await run_in_threadpool(launcher.run, run_id)
        left = deadline - anyio.current_time()
        if row is None or row["status"] in FINISHED or left <= 0:
            return row
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, 1.0)


async def post_sync(ctx: ApiContext, request: Request) -> Response:
    """Start one reconciliation of a configured cloud: 202 and its Location (200 once it has finished)."""
    require(principal_of(ctx, request), "admin")
    runtime = _configured(ctx)
    cloud = checked_text(request.path_params["cloud"], "cloud")
    runtime.check_cloud(cloud)  # UnknownCloud: 404, by the app's handler
    key = _idempotency_key(request)
    wait = _wait_seconds(request)
    launcher = launcher_of(ctx)
    try:
        started = await run_in_threadpool(launcher.start, cloud, key)
    except SyncInProgress as busy:
        extra = {"run_id": busy.run_id, "location": run_location(cloud, busy.run_id) if busy.run_id else None}
        return error(409, "sync_in_progress", str(busy), **extra)
    except ShuttingDown as exc:
        return error(503, "shutting_down", str(exc))
    row = await _read(launcher, started.run_id, wait)
    if row is None:  # the run's row was deleted by hand meanwhile
        raise ApiError(error(404, "not_found", f"sync run {started.run_id} is gone"))
    # 202: the run was started (or, for a repeated Idempotency-Key, had been); 200 only for a caller
    # who asked to wait and got the finished run.
    return _answer(cloud, row, status=200 if wait and row["status"] in FINISHED else 202)


async def get_sync_run(ctx: ApiContext, request: Request) -> Response:
    """One run's ``sync_runs`` row, ``running`` until it ends."""
    require(principal_of(ctx, request), "admin")
    _configured(ctx)
    cloud = checked_text(request.path_params["cloud"], "cloud")
    run_id = checked_text(request.path_params["run_id"], "run_id")
    wait = _wait_seconds(request)
    row = await _read(launcher_of(ctx), run_id, wait)
    if row is None or row["cloud"] != cloud:
        raise ApiError(error(404, "not_found", f"no sync run {run_id!r} of cloud {cloud!r}"))
    return _answer(cloud, row, status=200)


def _answer(cloud: str, row: dict[str, Any], *, status: int) -> JSON:
    return JSON(row, status_code=status, headers={"Location": run_location(cloud, row["run_id"])})
