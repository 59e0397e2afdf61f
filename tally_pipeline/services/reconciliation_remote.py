"""Asking a running tally API to reconcile clouds, and following each run to its end (``tally sync-remote``:
what the Kubernetes CronJob ``tally-sync`` runs, for deployments without the Dagster daemon).

Each cloud gets one ``POST /internal/sync/{cloud}`` with an Idempotency-Key made of the caller's key
and the cloud, so a retried request (a lost answer, a restarted pod of the same Job) answers the run
the first one started instead of starting another. A ``409`` names the run already going (a Dagster
schedule's, another caller's): that run is followed instead. Each run is then read at its
``Location`` with ``?wait`` until it has ended, or until the deadline.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tally_pipeline.collector.backoff import Backoff, parse_retry_after
from tally_pipeline.core.errors import PlatformError

#: The API's route (docs/openapi.yaml); ``{cloud}`` is a configured cloud's name.
SYNC_PATH = "/internal/sync/{cloud}"
#: Seconds each read of a run waits for its end: under the API's 60 s cap and a proxy's read timeout.
FOLLOW_WAIT = 55
#: Statuses the API answers for a transient condition: retried with backoff until the deadline.
TRANSIENT = frozenset({429, 502, 503, 504})


class RemoteSyncError(PlatformError, RuntimeError):
    """The API refused the request for good (unknown cloud, bad token, …), or stayed unreachable."""


@dataclass
class RemoteRun:
    """One cloud's run as the API last answered it."""

    cloud: str
    run_id: str | None = None
    location: str | None = None
    status: str = "not started"
    row: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    joined: bool = False  # the run was already going (409): followed, not started

    @property
    def failed(self) -> bool:
        """The run failed, or could not be started or followed to its end."""
        return self.status not in ("succeeded", "partial")

    def summary(self) -> dict[str, Any]:
        counts = {k: self.row.get(k) for k in ("created", "updated", "deleted", "recovered", "deferred")}
        return {"cloud": self.cloud, "run_id": self.run_id, "status": self.status, "joined": self.joined,
                "error": self.error or self.row.get("error"), **counts}


class SyncClient:
    """Starts and follows syncs through one API (``base_url``) with an admin ``token``."""

    def __init__(self, base_url: str, token: str | None, *, timeout: float = FOLLOW_WAIT + 30,
                 backoff: Backoff | None = None, progress: Callable[[str], None] | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.progress = progress or (lambda message: None)  # one line per step, as it happens
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self.backoff = backoff or Backoff(base=1.0, max_delay=30.0)
        self._rng = random.Random()

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_all(self, clouds: Iterable[str], *, key: str | None, deadline: float) -> list[RemoteRun]:
        """Start a run of every cloud (they go on in parallel on the server), then follow each to its end."""
        runs = [self.start(cloud, key=f"{key}:{cloud}" if key else None, deadline=deadline) for cloud in clouds]
        for run in runs:
            if run.location is not None:
                self.follow(run, deadline=deadline)
        return runs

    def start(self, cloud: str, *, key: str | None, deadline: float) -> RemoteRun:
        run = RemoteRun(cloud)
        headers = {"Idempotency-Key": key} if key else {}
        try:
            answer = self._request("POST", SYNC_PATH.format(cloud=cloud), headers=headers, deadline=deadline)
        except RemoteSyncError as exc:
            run.error = str(exc)
            return run
        body = _json(answer)
        if answer.status_code in (200, 202):
            run.location = answer.headers.get("location")
            self._note(run, body)
            self.progress(f"{cloud}: run {run.run_id} started")
        elif answer.status_code == 409 and body.get("location"):
            run.run_id, run.location, run.joined, run.status = body.get("run_id"), body["location"], True, "running"
            self.progress(f"{cloud}: run {run.run_id} was already going: following it")
        else:
            run.error = f"POST {SYNC_PATH.format(cloud=cloud)}: {answer.status_code} {_detail(body, answer)}"
            self.progress(f"{cloud}: not started: {run.error}")
        return run

    def follow(self, run: RemoteRun, *, deadline: float) -> RemoteRun:
        """Read the run until it has ended; past ``deadline`` it counts as failed (``error`` says so)."""
        assert run.location is not None
        while run.status == "running" or run.status == "not started":
            left = deadline - time.monotonic()
            if left <= 0:
                run.status, run.error = "unfinished", f"still running when the deadline passed (run {run.run_id})"
                return run
            wait = max(0, min(FOLLOW_WAIT, int(left)))
            try:
                answer = self._request("GET", run.location, params={"wait": str(wait)}, deadline=deadline)
            except RemoteSyncError as exc:
                run.status, run.error = "unfinished", str(exc)
                return run
            if answer.status_code != 200:
                run.status = "unfinished"
                run.error = f"GET {run.location}: {answer.status_code} {_detail(_json(answer), answer)}"
                return run
            self._note(run, _json(answer))
        return run

    def _note(self, run: RemoteRun, body: dict[str, Any]) -> None:
        run.row = body
        run.run_id = body.get("run_id", run.run_id)
        run.status = body.get("status", run.status)

    def _request(self, method: str, path: str, *, deadline: float, **kwargs: Any) -> httpx.Response:
        """One call, retried with backoff while the API is unreachable or answers a transient status."""
        failures = 0
        while True:
            retry_after = None
            try:
                answer = self.http.request(method, path, **kwargs)
                if answer.status_code not in TRANSIENT:
                    return answer
                problem = f"{answer.status_code} {_detail(_json(answer), answer)}"
                retry_after = parse_retry_after(answer.headers.get("retry-after"), time.time())
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            failures += 1
            pause = self.backoff.delay(failures, self._rng, retry_after)
            if time.monotonic() + pause > deadline:
                raise RemoteSyncError(f"{method} {path}: {problem} (gave up after {failures} attempts)")
            time.sleep(pause)  # backing off from an API that is down, not synchronising


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _detail(body: dict[str, Any], answer: httpx.Response) -> str:
    if body.get("error"):
        return f"{body['error']}: {body.get('detail', '')}".rstrip(": ")
    return answer.text[:200]
