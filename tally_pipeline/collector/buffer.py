"""The collector's on-disk buffer: one SQLite file, one row per event, fsync'd on every commit.

Layout of ``<buffer_dir>/buffer.sqlite3`` (WAL journal, ``synchronous=FULL``, so a commit is on
disk when it returns):

- ``buffered``: events waiting to be sent — ``seq`` (insertion order), ``event_id``, ``body`` (the
  event's JSON as submitted), ``size`` (bytes of the body), ``enqueued_at`` (unix time),
  ``attempts`` (times it was put in a request), ``last_attempt_at`` and ``claimed_by`` (the sender
  instance holding it in an in-flight request, else NULL).
- ``rejected``: the local rejected log — events the API answered ``rejected`` for, events the
  collector itself could not send, and messages read off a notification bus that are no event
  (``origin`` ``api``, ``local`` or ``bus``), with reason and message. A ``bus`` row's ``body`` is
  the message as received, not an event: it is never requeued, and at most ``max_bus_rejections``
  of them are kept (the oldest go first, counted in ``sender_state``).
- ``totals``: the buffered count and bytes, kept by triggers so the bound is checked in O(1).
- ``sender_state``: key/value notes of the last send attempt, success and error (for ``status``).

Several processes may open one buffer: SQLite's locking serialises writers (each waits up to
``busy_timeout`` for the lock), and a sender *claims* the rows of a batch before posting them, so
two senders never post the same batch while both live. Each open buffer holds an exclusive
``flock`` on ``<buffer_dir>/senders/<owner>.lock`` for its lifetime; a claim whose owner's lock is
free (the process died mid-send) is released by the next sender that looks, and that batch is sent
again — a crash delays a batch and may duplicate it (the API absorbs that), it never loses it. The
directory must be on a local filesystem (SQLite's WAL and flock need one); open a buffer after a
``fork``, not before (a child holding the parent's lock keeps its claims alive).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tally_pipeline.collector.errors import BufferFull, BufferSchemaError, BufferUnusable

DB_NAME = "buffer.sqlite3"
SENDERS_DIR = "senders"
SCHEMA_VERSION = 1
Order = Literal["oldest", "newest"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS buffered (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    enqueued_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_attempt_at REAL,
    claimed_by TEXT
);
CREATE INDEX IF NOT EXISTS buffered_unclaimed ON buffered(seq) WHERE claimed_by IS NULL;
CREATE INDEX IF NOT EXISTS buffered_claims ON buffered(claimed_by) WHERE claimed_by IS NOT NULL;

CREATE TABLE IF NOT EXISTS rejected (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    message TEXT,
    origin TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    rejected_at REAL NOT NULL,
    attempts INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS rejected_reason ON rejected(reason);

CREATE TABLE IF NOT EXISTS totals (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    events INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO totals (id, events, bytes) VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS buffered_counted_in AFTER INSERT ON buffered BEGIN
    UPDATE totals SET events = events + 1, bytes = bytes + NEW.size WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS buffered_counted_out AFTER DELETE ON buffered BEGIN
    UPDATE totals SET events = events - 1, bytes = bytes - OLD.size WHERE id = 1;
END;

CREATE TABLE IF NOT EXISTS sender_state (key TEXT PRIMARY KEY, value TEXT);
"""


@dataclass(frozen=True, slots=True)
class BufferedItem:
    seq: int
    event_id: str | None
    body: str
    size: int
    enqueued_at: float
    attempts: int


@dataclass(frozen=True, slots=True)
class RejectionNote:
    """One claimed item to move to the rejected log."""

    seq: int
    reason: str
    message: str | None
    origin: Literal["api", "local"]


@dataclass(frozen=True, slots=True)
class BusRejection:
    """A message read off a notification bus that is no event: kept, with why, instead of blocking the queue."""

    event_id: str | None
    body: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class BufferGauges:
    """What a metrics scrape reads: cheap, whatever the buffer holds."""

    buffered: int
    buffered_bytes: int
    oldest_enqueued_at: float | None
    rejected: int
    bus_rejections_dropped: int


@dataclass(frozen=True, slots=True)
class RejectedItem:
    seq: int
    event_id: str | None
    body: str
    reason: str
    message: str | None
    origin: str
    enqueued_at: float
    rejected_at: float
    attempts: int


@dataclass
class BufferStatus:
    """What ``tally collector status`` shows."""

    path: str
    buffered: int
    buffered_bytes: int
    claimed: int
    oldest_enqueued_at: float | None
    max_attempts: int
    rejected: int
    top_reasons: list[tuple[str, int]]
    sender: dict[str, str] = field(default_factory=dict)
    now: float = 0.0

    @property
    def oldest_age(self) -> float | None:
        return None if self.oldest_enqueued_at is None else max(0.0, self.now - self.oldest_enqueued_at)

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "buffered": self.buffered,
            "buffered_bytes": self.buffered_bytes,
            "claimed": self.claimed,
            "oldest_enqueued_at": self.oldest_enqueued_at,
            "oldest_age_seconds": self.oldest_age,
            "max_attempts": self.max_attempts,
            "rejected": self.rejected,
            "top_reasons": [{"reason": r, "count": n} for r, n in self.top_reasons],
            "sender": dict(self.sender),
        }


def _connect(path: Path, *, create: bool, busy_timeout: float) -> sqlite3.Connection:
    uri = f"file:{path}?mode={'rwc' if create else 'rw'}"
    con = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        con.execute("PRAGMA journal_mode=WAL").fetchall()
        # FULL: the WAL is fsync'd at every commit, so a returned submit survives a power cut.
        con.execute("PRAGMA synchronous=FULL")
    except BaseException:
        con.close()
        raise
    return con


def _usable_dir(path: Path) -> None:
    """Make the buffer directory if need be, and say plainly when it cannot be one (rather than let
    SQLite answer "unable to open database file")."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(20, "it is not a directory", str(path))
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):  # also false on a read-only file system, for root too
        raise PermissionError(13, "no permission to create files in it, or its file system is read-only")


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return f"its {DB_NAME} cannot be written ({exc})"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _OwnerLock:
    """An exclusive flock that says "this sender is alive" for as long as the buffer is open."""

    def __init__(self, senders: Path, owner: str):
        senders.mkdir(parents=True, exist_ok=True)
        self.path = senders / f"{owner}.lock"
        # Lock under a temporary name, then rename: a sweeper never sees our final name unlocked.
        temp = senders / f".{owner}.tmp"
        self.fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.replace(temp, self.path)

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = -1


def _owner_alive(senders: Path, owner: str) -> bool:
    """True while the sender ``owner`` holds its lock; a dead sender's lock file is removed."""
    path = senders / f"{owner}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return False
    finally:
        os.close(fd)


class DiskBuffer:
    """The SQLite buffer of one collector instance. Thread-safe; several instances may share a directory."""

    def __init__(
        self,
        buffer_dir: str | os.PathLike[str],
        *,
        max_events: int = 1_000_000,
        max_bytes: int = 1 << 30,
        busy_timeout: float = 30.0,
        owner: str | None = None,
        max_bus_rejections: int = 100_000,
    ):
        if max_events < 1 or max_bytes < 1 or max_bus_rejections < 1:
            raise ValueError("the buffer limits must be positive")
        self.dir = Path(buffer_dir)
        self.path = self.dir / DB_NAME
        self.senders = self.dir / SENDERS_DIR
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_bus_rejections = max_bus_rejections
        self.owner = owner or uuid.uuid4().hex
        self._lock = threading.RLock()
        self._closed = False
        try:
            _usable_dir(self.dir)
            created = not self.path.exists()
            self._con = _connect(self.path, create=True, busy_timeout=busy_timeout)
        except (OSError, sqlite3.Error) as exc:
            raise BufferUnusable(self.dir, _why(exc)) from None
        try:
            self._migrate()
            if created:
                _fsync_dir(self.dir)
            self._owner_lock = _OwnerLock(self.senders, self.owner)
        except BaseException as exc:
            self._con.close()
            if isinstance(exc, OSError | sqlite3.Error):
                raise BufferUnusable(self.dir, _why(exc)) from None
            raise
        self._sweep_dead_locks()

    # -- plumbing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front (BEGIN IMMEDIATE) so it never fails half-way on a lock."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the collector buffer is closed")
            con = self._con
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the collector buffer is closed")
            self._con.execute("BEGIN")
            try:
                yield self._con
            finally:
                self._con.execute("COMMIT")

    def _migrate(self) -> None:
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise BufferSchemaError(
                    f"{self.path} has buffer schema version {version}; this collector knows up to {SCHEMA_VERSION}"
                )
            if version < SCHEMA_VERSION:
                for statement in _statements(_SCHEMA):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def _sweep_dead_locks(self) -> None:
        """Remove the lock files of senders that died holding no claim (they would pile up otherwise)."""
        for path in self.senders.glob("*.lock"):
            if path.stem != self.owner:
                _owner_alive(self.senders, path.stem)

    def pragma(self, name: str) -> object:
        with self._lock:
            return self._con.execute(f"PRAGMA {name}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self.release_all()
            finally:
                self._closed = True
                self._con.close()
                self._owner_lock.release()

    # -- writing events in --------------------------------------------------------------------

    def append(
        self, entries: Sequence[tuple[str | None, str, int]], now: float, *, rejected: Sequence[BusRejection] = ()
    ) -> None:
        """Buffer ``(event_id, body, size)`` entries, and log ``rejected`` bus messages, in one fsync'd
        transaction, all or none (a consumer acknowledges the messages they came from once it returns)."""
        if not entries and not rejected:
            return
        added = sum(size for _, _, size in entries)
        with self._write() as con:
            if entries:
                events, size = con.execute("SELECT events, bytes FROM totals WHERE id = 1").fetchone()
                if events + len(entries) > self.max_events:
                    raise BufferFull(str(self.path), buffered=events, limit=self.max_events, offered=len(entries))
                if size + added > self.max_bytes:
                    raise BufferFull(str(self.path), buffered=size, limit=self.max_bytes, offered=added, unit="bytes")
                con.executemany(
                    "INSERT INTO buffered (event_id, body, size, enqueued_at) VALUES (?, ?, ?, ?)",
                    [(event_id, body, size_, now) for event_id, body, size_ in entries],
                )
            if rejected:
                con.executemany(
                    "INSERT INTO rejected (event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts) "
                    "VALUES (?, ?, ?, ?, 'bus', ?, ?, 0)",
                    [(r.event_id, r.body, r.reason, r.message, now, now) for r in rejected],
                )
                self._trim_bus_rejections(con)

    def _trim_bus_rejections(self, con: sqlite3.Connection) -> None:
        """Keep the newest ``max_bus_rejections`` bus rows: a bus that sends nothing but poison must not fill
        the disk. What is dropped is counted (``bus_rejections_dropped``), never silently forgotten."""
        kept = con.execute("SELECT count(*) FROM rejected WHERE origin = 'bus'").fetchone()[0]
        excess = kept - self.max_bus_rejections
        if excess <= 0:
            return
        con.execute(
            "DELETE FROM rejected WHERE seq IN "
            "(SELECT seq FROM rejected WHERE origin = 'bus' ORDER BY seq LIMIT ?)", (excess,)
        )
        con.execute(
            "INSERT INTO sender_state (key, value) VALUES ('bus_rejections_dropped', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + ?",
            (str(excess), excess),
        )

    # -- the sender's side --------------------------------------------------------------------

    def recover_dead_claims(self) -> int:
        """Release the claims of senders that died mid-send; returns how many items came back."""
        with self._lock:
            owners = [r[0] for r in self._con.execute(
                "SELECT DISTINCT claimed_by FROM buffered WHERE claimed_by IS NOT NULL"
            ).fetchall()]
        dead = [o for o in owners if o != self.owner and not _owner_alive(self.senders, o)]
        released = 0
        for owner in dead:
            with self._write() as con:
                released += con.execute(
                    "UPDATE buffered SET claimed_by = NULL WHERE claimed_by = ?", (owner,)
                ).rowcount
        return released

    def claim(self, *, limit: int, max_bytes: int | None, order: Order, now: float) -> list[BufferedItem]:
        """Claim up to ``limit`` unclaimed items (and about ``max_bytes`` of bodies) for one request."""
        direction = "ASC" if order == "oldest" else "DESC"
        with self._write() as con:
            rows = con.execute(
                "SELECT seq, event_id, body, size, enqueued_at, attempts FROM buffered "
                f"WHERE claimed_by IS NULL ORDER BY seq {direction} LIMIT ?",
                (limit,),
            ).fetchall()
            items: list[BufferedItem] = []
            total = 0
            for seq, event_id, body, size, enqueued_at, attempts in rows:
                if items and max_bytes is not None and total + size + 1 > max_bytes:
                    break
                total += size + 1
                items.append(BufferedItem(seq, event_id, body, size, enqueued_at, attempts + 1))
            con.executemany(
                "UPDATE buffered SET claimed_by = ?, attempts = attempts + 1, last_attempt_at = ? WHERE seq = ?",
                [(self.owner, now, item.seq) for item in items],
            )
        return items

    def settle(self, *, done: Iterable[int], rejected: Iterable[RejectionNote], now: float) -> None:
        """Delete delivered items and move rejected ones to the rejected log, in one transaction.

        Only rows this sender still claims are touched, so a row another sender took over stays put.
        """
        done = list(done)
        rejected = list(rejected)
        with self._write() as con:
            con.executemany(
                "INSERT INTO rejected (event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts) "
                "SELECT event_id, body, ?, ?, ?, enqueued_at, ?, attempts FROM buffered "
                "WHERE seq = ? AND claimed_by = ?",
                [(r.reason, r.message, r.origin, now, r.seq, self.owner) for r in rejected],
            )
            con.executemany(
                "DELETE FROM buffered WHERE seq = ? AND claimed_by = ?",
                [(seq, self.owner) for seq in (*done, *(r.seq for r in rejected))],
            )

    def release_all(self) -> int:
        """Give back every claim this sender holds (after a failed or partly answered request)."""
        with self._write() as con:
            return con.execute("UPDATE buffered SET claimed_by = NULL WHERE claimed_by = ?", (self.owner,)).rowcount

    def note_sender(self, values: dict[str, str | None]) -> None:
        with self._write() as con:
            con.executemany(
                "INSERT INTO sender_state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )

    # -- reading ------------------------------------------------------------------------------

    def count(self) -> int:
        with self._lock:
            return self._con.execute("SELECT events FROM totals WHERE id = 1").fetchone()[0]

    def unclaimed(self) -> int:
        with self._lock:
            return self._con.execute("SELECT count(*) FROM buffered WHERE claimed_by IS NULL").fetchone()[0]

    def items(self) -> list[BufferedItem]:
        with self._read() as con:
            rows = con.execute(
                "SELECT seq, event_id, body, size, enqueued_at, attempts FROM buffered ORDER BY seq"
            ).fetchall()
        return [BufferedItem(*row) for row in rows]

    def rejected(self, *, reason: str | None = None, limit: int | None = None) -> list[RejectedItem]:
        """The rejected log, newest first."""
        sql = "SELECT seq, event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts FROM rejected"
        params: list[object] = []
        if reason is not None:
            sql += " WHERE reason = ?"
            params.append(reason)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._read() as con:
            return [RejectedItem(*row) for row in con.execute(sql, params).fetchall()]

    def status(self, now: float) -> BufferStatus:
        with self._lock:
            return _status(self._con, str(self.path), now)

    def gauges(self) -> BufferGauges:
        with self._read() as con:
            events, size = con.execute("SELECT events, bytes FROM totals WHERE id = 1").fetchone()
            oldest = con.execute("SELECT enqueued_at FROM buffered ORDER BY seq LIMIT 1").fetchone()
            rejected = con.execute("SELECT count(*) FROM rejected").fetchone()[0]
            dropped = con.execute("SELECT value FROM sender_state WHERE key = 'bus_rejections_dropped'").fetchone()
        return BufferGauges(events, size, None if oldest is None else oldest[0], rejected,
                            int(dropped[0]) if dropped else 0)

    def requeue_rejected(self, *, reason: str | None, now: float) -> int:
        """Put rejected events back in the buffer (after the API was fixed to accept them); returns how many.

        Bus rows stay: they hold a message as it came off the bus, not an event the API could take."""
        where, params = "WHERE origin <> 'bus'", []
        if reason is not None:
            where, params = where + " AND reason = ?", [reason]
        with self._write() as con:
            moving, added = con.execute(
                f"SELECT count(*), coalesce(sum(length(CAST(body AS BLOB))), 0) FROM rejected {where}", params
            ).fetchone()
            events, size = con.execute("SELECT events, bytes FROM totals WHERE id = 1").fetchone()
            if events + moving > self.max_events:
                raise BufferFull(str(self.path), buffered=events, limit=self.max_events, offered=moving)
            if size + added > self.max_bytes:
                raise BufferFull(str(self.path), buffered=size, limit=self.max_bytes, offered=added, unit="bytes")
            con.execute(
                "INSERT INTO buffered (event_id, body, size, enqueued_at) "
                f"SELECT event_id, body, length(CAST(body AS BLOB)), ? FROM rejected {where} ORDER BY seq",
                [now, *params],
            )
            con.execute(f"DELETE FROM rejected {where}", params)
        return moving


def _statements(script: str) -> Iterator[str]:
    """Split the schema script into statements (triggers hold semicolons, so split on complete ones)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                yield pending.strip()
            pending = ""


def _status(con: sqlite3.Connection, path: str, now: float) -> BufferStatus:
    con.execute("BEGIN")
    try:
        events, size = con.execute("SELECT events, bytes FROM totals WHERE id = 1").fetchone()
        claimed = con.execute("SELECT count(*) FROM buffered WHERE claimed_by IS NOT NULL").fetchone()[0]
        oldest = con.execute("SELECT enqueued_at FROM buffered ORDER BY seq LIMIT 1").fetchone()
        attempts = con.execute("SELECT coalesce(max(attempts), 0) FROM buffered").fetchone()[0]
        rejected = con.execute("SELECT count(*) FROM rejected").fetchone()[0]
        reasons = con.execute(
            "SELECT reason, count(*) AS n FROM rejected GROUP BY reason ORDER BY n DESC, reason LIMIT 5"
        ).fetchall()
        sender = dict(con.execute("SELECT key, value FROM sender_state WHERE value IS NOT NULL").fetchall())
    finally:
        con.execute("COMMIT")
    return BufferStatus(
        path=path,
        buffered=events,
        buffered_bytes=size,
        claimed=claimed,
        oldest_enqueued_at=None if oldest is None else oldest[0],
        max_attempts=attempts,
        rejected=rejected,
        top_reasons=[(r, n) for r, n in reasons],
        sender=sender,
        now=now,
    )


def buffer_status(buffer_dir: str | os.PathLike[str], *, now: float | None = None) -> BufferStatus:
    """Read a buffer's status without opening it as a sender (creates nothing; FileNotFoundError if absent)."""
    path = Path(buffer_dir) / DB_NAME
    if not path.exists():
        raise FileNotFoundError(f"no collector buffer at {buffer_dir} ({DB_NAME} not found)")
    con = _connect(path, create=False, busy_timeout=30.0)
    try:
        return _status(con, str(path), time.time() if now is None else now)
    finally:
        con.close()
