"""Test support for the collector: a loopback HTTP server and an ingest API that follows the HTTP API contract (docs/architecture.md, «The HTTP API»).

``ContractAPI`` validates with the real envelope validator and deduplicates on event_id in memory;
its ``script`` forces the next answers (503, 429 with Retry-After, 413, 401, …) so the sender's
fault handling can be driven over a real socket. ``LoopbackServer`` serves any ASGI app with
uvicorn on a port it binds up front: connections are refused until ``start`` is called, then the
same port answers (the API "comes up").
"""

from __future__ import annotations

import socket
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tally_pipeline.core.envelope import Rejection, validate_event
from tally_pipeline.schemas import default_registry

TOKEN = "collector-secret"


def volume_event(i: int, *, cloud: str = "c1", **overrides: Any) -> dict[str, Any]:
    """A valid ``volume.create.end`` event numbered ``i``."""
    event: dict[str, Any] = {
        "event_id": f"ev-{i:06d}",
        "event_type": "volume.create.end",
        "cloud": cloud,
        "resource_type": "volume",
        "resource_id": f"vol-{i}",
        "project_id": "p1",
        "occurred_at": "2024-05-01T10:00:00Z",
        "payload": {"size": {"gb": 10 + i % 7, "volume_type": "ssd"}},
    }
    event.update(overrides)
    return event


@dataclass
class Forced:
    """One scripted answer: status, JSON (or raw bytes) body, headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> Response:
        if isinstance(self.body, bytes):
            return Response(self.body, status_code=self.status, headers=self.headers)
        return JSONResponse(self.body if self.body is not None else {"error": "forced"}, self.status, self.headers)


@dataclass
class Seen:
    """One request as the API saw it."""

    status: int
    size: int
    event_ids: list[str | None]


class ContractAPI:
    """``POST /v1/events`` per the contract, in memory. Thread-safe; inspect it from the test."""

    def __init__(self, *, tokens: tuple[str, ...] = (TOKEN,), max_batch: int = 1000, max_body: int | None = None):
        self.tokens = set(tokens)
        self.max_batch = max_batch
        self.max_body = max_body
        self.registry = default_registry()
        self.script: deque[Forced] = deque()
        self.stored: dict[str, dict[str, Any]] = {}
        self.store_count: Counter[str] = Counter()
        self.seen: list[Seen] = []
        self.received = threading.Event()
        # When ``hold`` is an Event, the answer to request number ``hold_from`` (0-based) and later ones is
        # held, after the batch is stored, until it is set; ``held`` says one is being held.
        self.hold: threading.Event | None = None
        self.hold_from = 0
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._seen_changed = threading.Condition(self._lock)
        self.app = Starlette(routes=[Route("/v1/events", self._events, methods=["POST"])])

    def answered(self, status: int) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.status == status]

    def _record(self, status: int, body: bytes, ids: list[str | None]) -> None:
        with self._lock:
            self.seen.append(Seen(status, len(body), ids))
            self._seen_changed.notify_all()

    def wait_seen(self, count: int, timeout: float) -> bool:
        """Block until ``count`` requests have been answered or held."""
        with self._seen_changed:
            return self._seen_changed.wait_for(lambda: len(self.seen) >= count, timeout)

    async def _events(self, request: Request) -> Response:
        body = await request.body()
        ids = _ids(body)
        with self._lock:
            forced = self.script.popleft() if self.script else None
        if forced is not None:
            self._record(forced.status, body, ids)
            self.received.set()
            return forced.response()
        answer = self._answer(request, body)
        with self._lock:
            ordinal = len(self.seen)
        self._record(answer.status_code, body, ids)
        self.received.set()
        hold = self.hold
        if hold is not None and ordinal >= self.hold_from:
            self.held.set()
            await anyio.to_thread.run_sync(hold.wait)
        return answer

    def _answer(self, request: Request, body: bytes) -> Response:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in self.tokens:
            return JSONResponse({"error": "unauthorized"}, 401)
        if self.max_body is not None and len(body) > self.max_body:
            return JSONResponse({"error": "body_too_large", "max_bytes": self.max_body}, 413)
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return JSONResponse({"error": "invalid_json", "detail": str(exc)}, 400)
        if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
            return JSONResponse({"error": "invalid_body", "detail": "expected {\"events\": [...]}"}, 400)
        items = doc["events"]
        if len(items) > self.max_batch:
            return JSONResponse({"error": "batch_too_large", "max": self.max_batch}, 413)
        results = []
        counts = Counter()
        with self._lock:
            for index, item in enumerate(items):
                checked = validate_event(item, self.registry)
                if isinstance(checked, Rejection):
                    event_id = item.get("event_id") if isinstance(item, dict) else None
                    results.append({"index": index, "event_id": event_id if isinstance(event_id, str) else None,
                                    "status": "rejected", "reason": checked.reason, "message": checked.message})
                    counts["rejected"] += 1
                elif checked.event_id in self.stored:
                    result = {"index": index, "event_id": checked.event_id, "status": "duplicate"}
                    if self.stored[checked.event_id] != item:
                        result["conflict"] = True
                    results.append(result)
                    counts["duplicates"] += 1
                else:
                    self.stored[checked.event_id] = item
                    self.store_count[checked.event_id] += 1
                    results.append({"index": index, "event_id": checked.event_id, "status": "stored"})
                    counts["stored"] += 1
        return JSONResponse({"results": results, "stored": counts["stored"],
                             "duplicates": counts["duplicates"], "rejected": counts["rejected"]})


def wait_for_outcome(collector: Any, outcome: str, timeout: float = 30.0) -> bool:
    """Wait (on the sender's progress signal, never by sleeping) until its last attempt had ``outcome``."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if collector.status().sender.get("last_outcome") == outcome:
            return True
        collector.wait_until_empty(timeout=0.1)
    return False


def _ids(body: bytes) -> list[str | None]:
    try:
        doc = orjson.loads(body)
        return [e.get("event_id") if isinstance(e, dict) else None for e in doc["events"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return []


class LoopbackServer:
    """uvicorn on 127.0.0.1 with a port bound at construction; refuses connections until ``start``."""

    def __init__(self, app: Any):
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LoopbackServer:
        # Listening first means a client may connect at once: the kernel queues it until uvicorn accepts.
        self.sock.listen(128)
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
