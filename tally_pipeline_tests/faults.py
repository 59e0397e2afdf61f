"""Shared pieces of the fault-injection tests: a migrated database, a tokens file, reading what is stored."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tally_pipeline.store import open_store
from tally_pipeline_tests.collector_api import volume_event

TOKEN = "fault-collector-token-000000"
FAULT_APP = "tally-fault-injector"  # application_name of the test's own sessions, so they are never cut


def session(url: str) -> psycopg.Connection:
    """A connection of the test's own (marked, so the fault injector never cuts it)."""
    return psycopg.connect(url, autocommit=True, application_name=FAULT_APP)


def api_sessions(conn: psycopg.Connection) -> list[tuple[int, str | None, str | None, str | None]]:
    """(pid, state, wait_event_type, query) of every client session on this database that is not the test's."""
    return conn.execute(
        "SELECT pid, state, wait_event_type, query FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name <> %s AND backend_type = 'client backend'",
        (FAULT_APP,),
    ).fetchall()


def cursor_sessions(conn: psycopg.Connection, cursor: str) -> list[tuple[str, str]]:
    """(state, query) of the other sessions of this database whose last statement named ``cursor``."""
    return [(state, query) for state, query in conn.execute(
        "SELECT state, query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND query ILIKE %s", (f"%{cursor}%",)).fetchall()]


def wait_until(condition: Any, what: str, timeout: float = 30.0) -> Any:
    """Poll an external system (the database's view of its sessions) until ``condition()`` is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_for_blocked(watcher: psycopg.Connection, query_starts: str) -> int:
    """The pid of the API session waiting on a lock in the statement starting ``query_starts``, once there is one."""

    def waiting() -> int | None:
        for pid, state, wait, query in api_sessions(watcher):
            if state == "active" and wait == "Lock" and (query or "").lstrip().startswith(query_starts):
                return pid
        return None

    return wait_until(waiting, f"an API transaction to block in {query_starts!r}")


def holds_lock_on(watcher: psycopg.Connection, pid: int, table: str, mode: str) -> bool:
    return bool(watcher.execute(
        "SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "WHERE l.pid = %s AND c.relname = %s AND l.mode = %s AND l.granted", (pid, table, mode)).fetchone())


def migrate(url: str) -> str:
    with open_store(url, migrate=True):
        pass
    return url


def tokens_file(directory: Path) -> Path:
    path = directory / "tokens.yaml"
    path.write_text(f"tokens:\n  - {{token_sha256: {hashlib.sha256(TOKEN.encode()).hexdigest()}, scopes: ['ingest:*', read]}}\n")
    return path


def stored_ids(url: str) -> list[str]:
    """Every stored event_id (a list, so a duplicate would show; the dedup key should make that impossible)."""
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT event_id FROM events")]


def wait_connections_gone(url: str, timeout: float = 30.0) -> None:
    """Wait until no other client session is connected to the database of ``url`` (after the API is killed,
    its sessions finish rolling back or committing whatever was in flight, then end)."""
    with session(url) as watcher:
        wait_until(lambda: not api_sessions(watcher), "the killed API's sessions to end", timeout)


def dead_letter(url: str) -> list[tuple[str, str | None]]:
    with psycopg.connect(url) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT reason, event_id FROM rejected_events ORDER BY id")]


def events(prefix: str, count: int, start: int = 0) -> list[dict[str, Any]]:
    return [volume_event(i, event_id=f"{prefix}-{i}", resource_id=f"{prefix}-vol-{i}") for i in range(start, start + count)]


def invalid(prefix: str, count: int) -> list[dict[str, Any]]:
    return [volume_event(i, event_id=f"{prefix}-bad-{i}", payload={"size": {"gb": -1}}) for i in range(count)]


@dataclass
class BatchLog:
    """What a stream of batch posts saw: the batches answered 200, the one that failed, and why."""

    answered: list[int] = field(default_factory=list)
    failed: int | None = None
    error: str | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_answered(self, count: int, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.answered) >= count or self.failed is not None, timeout)


def post_batches(url: str, batches: list[list[dict[str, Any]]], log: BatchLog, *, timeout: float = 60.0) -> None:
    """Post batches one after another until one fails (no answer, or not 200); record each in ``log``."""
    with httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for number, batch in enumerate(batches):
            try:
                response = http.post(f"{url}/v1/events", json={"events": batch})
                ok = response.status_code == 200 and len(response.json()["results"]) == len(batch)
                error = None if ok else f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                ok, error = False, f"{type(exc).__name__}: {exc}"
            with log.changed:
                if ok:
                    log.answered.append(number)
                else:
                    log.failed, log.error = number, error
                log.changed.notify_all()
            if not ok:
                return


@contextmanager
def in_thread(target: Any, *args: Any) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(120)


def ids_of(batches: Iterable[list[dict[str, Any]]]) -> set[str]:
    return {event["event_id"] for batch in batches for event in batch}
