"""The collector's on-disk buffer: one SQLite file, one row per event, fsync'd whenever events come in.

Layout of ``<buffer_dir>/buffer.sqlite3`` (WAL journal). A transaction that takes events in (``append``,
``requeue_rejected``) commits with ``synchronous=FULL``: it is on disk when it returns. The sender's
transactions (claims, settles, notes) commit with ``synchronous=NORMAL``, not fsync'd on their own:
a power cut may undo the last of them, which only sends their events again (the API absorbs a
second copy), and the next FULL commit puts them on disk with its own (the WAL is synced as a
whole). A killed process loses none of them (they are in the operating system's hands).

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
import errno
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from tally_pipeline.collector.errors import BufferDiskFull, BufferFull, BufferSchemaError, BufferUnusable

log = logging.getLogger("tally_pipeline.collector")

DB_NAME = "buffer.sqlite3"
SENDERS_DIR = "senders"
RESERVE_NAME = "reserve"
#: The WAL is checkpointed beyond this many pages, and cut back to ``WAL_LIMIT_BYTES`` after.
WAL_PAGES = 256
WAL_LIMIT_BYTES = 1 << 20
SCHEMA_VERSION = 2
Order = Literal["oldest", "newest"]
T = TypeVar("T")
#: What a rejected row weighs against ``max_rejected_bytes``: its body and its message, in bytes.
_ROW_BYTES = "(length(CAST({0}body AS BLOB)) + coalesce(length(CAST({0}message AS BLOB)), 0))"

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

#: Version 2: a bus row's whole size and digest beside its excerpt; the rejected log's bytes in ``totals``.
_SCHEMA_2 = f"""
ALTER TABLE rejected ADD COLUMN size INTEGER;
ALTER TABLE rejected ADD COLUMN digest TEXT;
ALTER TABLE totals ADD COLUMN rejected_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE totals SET rejected_bytes = (SELECT coalesce(sum({_ROW_BYTES.format('')}), 0) FROM rejected) WHERE id = 1;
CREATE TRIGGER IF NOT EXISTS rejected_counted_in AFTER INSERT ON rejected BEGIN
    UPDATE totals SET rejected_bytes = rejected_bytes + {_ROW_BYTES.format('NEW.')} WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS rejected_counted_out AFTER DELETE ON rejected BEGIN
    UPDATE totals SET rejected_bytes = rejected_bytes - {_ROW_BYTES.format('OLD.')} WHERE id = 1;
END;
"""
_MIGRATIONS = {1: _SCHEMA, 2: _SCHEMA_2}


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
    #: the message as text, masked and cut to an excerpt (``intake.raw_text``)
    body: str
    reason: str
    message: str
    #: the whole message's size in bytes and SHA-256 (hex), as it came off the bus
    size: int | None = None
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class BufferGauges:
    """What a metrics scrape reads: cheap, whatever the buffer holds."""

    buffered: int
    buffered_bytes: int
    oldest_enqueued_at: float | None
    rejected: int
    bus_rejections_dropped: int
    rejected_bytes: int = 0
    rejected_dropped: int = 0
    disk_full: bool = False
    disk_free_bytes: int | None = None


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
    size: int | None = None
    digest: str | None = None


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


def _connect(path: Path, *, create: bool, busy_timeout: float, fresh: bool = False) -> sqlite3.Connection:
    uri = f"file:{path}?mode={'rwc' if create else 'rw'}"
    con = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        if fresh:  # before anything is written: pages freed by a drain can go back to the file system
            con.execute("PRAGMA auto_vacuum = INCREMENTAL")
        con.execute("PRAGMA journal_mode=WAL").fetchall()
        # FULL: the WAL is fsync'd at every commit, so a returned submit survives a power cut.
        con.execute("PRAGMA synchronous=FULL")
        # A WAL of about 1 MiB (SQLite's default lets it reach 4 MiB and keeps it so): less disk held
        # beside the events, and less a checkpoint must write into the database when the disk is full.
        con.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        con.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}").fetchall()
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


def _is_disk_full(exc: BaseException) -> bool:
    """True when a write failed for want of space (SQLite's SQLITE_FULL, or ENOSPC from the file system)."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _allocate(path: Path, size: int) -> None:
    """A file of ``size`` bytes whose blocks are really allocated (not sparse), written to disk."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.lseek(fd, 0, os.SEEK_SET)  # a file system without fallocate: write the zeros
            chunk = b"\0" * (1 << 20)
            left = size
            while left > 0:
                left -= os.write(fd, chunk[: min(left, len(chunk))])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    os.close(fd)


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
        max_rejected_bytes: int = 64 << 20,
        reserve_bytes: int = 8 << 20,
    ):
        if max_events < 1 or max_bytes < 1 or max_bus_rejections < 1 or max_rejected_bytes < 1:
            raise ValueError("the buffer limits must be positive")
        if reserve_bytes < 0:
            raise ValueError("the buffer's reserve cannot be negative")
        self.dir = Path(buffer_dir)
        self.path = self.dir / DB_NAME
        self.senders = self.dir / SENDERS_DIR
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.max_bus_rejections = max_bus_rejections
        self.max_rejected_bytes = max_rejected_bytes
        self.reserve = self.dir / RESERVE_NAME
        self.reserve_bytes = reserve_bytes
        #: why the buffer refuses new events for want of disk space, or None while it takes them
        self.disk_full: str | None = None
        self.owner = owner or uuid.uuid4().hex
        self._lock = threading.RLock()
        self._closed = False
        self._durable = True  # the connection's synchronous setting: FULL (True) or NORMAL
        try:
            _usable_dir(self.dir)
            created = not self.path.exists()
            self._con = _connect(self.path, create=True, busy_timeout=busy_timeout, fresh=created)
        except (OSError, sqlite3.Error) as exc:
            raise BufferUnusable(self.dir, _why(exc)) from None
        try:
            self._migrate()
            if created:
                _fsync_dir(self.dir)
            self._owner_lock = _OwnerLock(self.senders, self.owner)
            self._keep_reserve()
        except BaseException as exc:
            self._con.close()
            if isinstance(exc, OSError | sqlite3.Error):
                raise BufferUnusable(self.dir, _why(exc)) from None
            raise
        self._sweep_dead_locks()

    # -- plumbing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front (BEGIN IMMEDIATE) so it never fails half-way on a lock.
        ``durable``: fsync'd at its commit (events coming in); else synced by the next one that is."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the collector buffer is closed")
            con = self._con
            if durable != self._durable:
                con.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
                self._durable = durable
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:  # a failed COMMIT (disk full) may leave the transaction open
                    with contextlib.suppress(sqlite3.Error):
                        con.execute("ROLLBACK")
                raise

    def _taking(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """One write transaction of the sender's side (taking events out). Its writes are small; when the
        disk is full the reserve is given back to the file system and the write is tried again."""
        try:
            with self._write(durable=False) as con:
                return work(con)
        except (sqlite3.Error, OSError) as exc:
            if not _is_disk_full(exc):
                raise
            self._on_disk_full(exc)
        with self._write(durable=False) as con:
            return work(con)

    def _on_disk_full(self, exc: BaseException) -> None:
        """The disk is full: refuse new events, and free the reserve so taking events out has room."""
        with self._lock:
            first = self.disk_full is None
            self.disk_full = f"the disk holding {self.dir} is full ({exc})"
            freed = 0
            with contextlib.suppress(FileNotFoundError):
                freed = self.reserve.stat().st_size
                self.reserve.unlink()
        if first:
            log.error("%s: new events are refused (they stay in the broker) until the buffer drains; "
                      "%d bytes of reserve given back so the sender can take events out", self.disk_full, freed)

    def _keep_reserve(self) -> bool:
        """Have the reserve allocated; True when it is (then the buffer takes events again).

        A reserve is made only with a quarter of it (at least 1 MiB) free beside it, so a disk that just
        drained a little does not go straight back to full."""
        with self._lock:
            return self._keep_reserve_locked()

    def _keep_reserve_locked(self) -> bool:
        if self.reserve_bytes == 0:
            self.disk_full = None
            return True
        with contextlib.suppress(FileNotFoundError):
            if self.reserve.stat().st_size >= self.reserve_bytes:
                if self.disk_full is not None:
                    log.info("the buffer takes events again")
                self.disk_full = None
                return True
        try:
            fs = os.statvfs(self.dir)
            headroom = max(self.reserve_bytes // 4, 1 << 20)
            if fs.f_bavail * fs.f_frsize < self.reserve_bytes + headroom:
                raise OSError(errno.ENOSPC, f"less free space than the reserve and {headroom} bytes more")
            _allocate(self.reserve, self.reserve_bytes)
        except OSError as exc:
            if self.disk_full is None:
                self.disk_full = f"the disk holding {self.dir} has no room for the buffer's reserve ({exc})"
                log.error("%s: new events are refused until there is", self.disk_full)
            return False
        if self.disk_full is not None:
            log.info("the buffer's reserve is allocated again: it takes events again")
        self.disk_full = None
        return True

    def _give_back_space(self) -> None:
        """After events went out while the disk is full: return freed pages to the file system, a few at a
        time (each step goes through the WAL, which is emptied after it, so it needs little room)."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            con = self._con
            if con.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:  # a buffer made before: no vacuum
                step = max(16, self.reserve_bytes // con.execute("PRAGMA page_size").fetchone()[0] // 8)
                free = con.execute("PRAGMA freelist_count").fetchone()[0]
                while free > 0:
                    con.executescript(f"PRAGMA incremental_vacuum({step});")  # execute() frees one page a step
                    con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                    free, before = con.execute("PRAGMA freelist_count").fetchone()[0], free
                    if free >= before:  # nothing moved (another connection holds a read): next time
                        break
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

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
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _statements(_MIGRATIONS[step]):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {step}")
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
        if self.disk_full is not None:
            self._give_back_space()
            if not self._keep_reserve():
                raise BufferDiskFull(str(self.path), self.disk_full or "the disk is full")
        try:
            self._append(entries, now, rejected)
        except (sqlite3.Error, OSError) as exc:
            if not _is_disk_full(exc):
                raise
            self._on_disk_full(exc)
            raise BufferDiskFull(str(self.path), self.disk_full or str(exc)) from None

    def _append(self, entries: Sequence[tuple[str | None, str, int]], now: float,
                rejected: Sequence[BusRejection]) -> None:
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
                    "INSERT INTO rejected (event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts, "
                    "size, digest) VALUES (?, ?, ?, ?, 'bus', ?, ?, 0, ?, ?)",
                    [(r.event_id, r.body, r.reason, r.message, now, now, r.size, r.digest) for r in rejected],
                )
                self._trim_bus_rejections(con)
                self._trim_rejected_bytes(con)

    def _trim_rejected_bytes(self, con: sqlite3.Connection) -> None:
        """Keep the rejected log within ``max_rejected_bytes``: the oldest rows go first, counted
        (``rejected_dropped``), so rejections can never take the disk the buffered events need."""
        excess = con.execute("SELECT rejected_bytes FROM totals WHERE id = 1").fetchone()[0] - self.max_rejected_bytes
        if excess <= 0:
            return
        last, dropped = None, 0
        for seq, size in con.execute(f"SELECT seq, {_ROW_BYTES.format('')} FROM rejected ORDER BY seq"):
            last, dropped, excess = seq, dropped + 1, excess - size
            if excess <= 0:
                break
        if last is None:
            return
        con.execute("DELETE FROM rejected WHERE seq <= ?", (last,))
        con.execute(
            "INSERT INTO sender_state (key, value) VALUES ('rejected_dropped', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + ?",
            (str(dropped), dropped),
        )

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
            released += self._taking(lambda con, owner=owner: con.execute(  # type: ignore[misc]
                "UPDATE buffered SET claimed_by = NULL WHERE claimed_by = ?", (owner,)).rowcount)
        return released

    def claim(self, *, limit: int, max_bytes: int | None, order: Order, now: float) -> list[BufferedItem]:
        """Claim up to ``limit`` unclaimed items (and about ``max_bytes`` of bodies) for one request.

        While the disk is full, a claim (and so the settle after it) holds at most an eighth of the
        reserve in bodies: each rewrites the pages its rows are on, and that must fit the room freed."""
        direction = "ASC" if order == "oldest" else "DESC"
        if self.disk_full is not None:
            small = max(64 << 10, self.reserve_bytes // 8)
            max_bytes = small if max_bytes is None else min(max_bytes, small)

        def work(con: sqlite3.Connection) -> list[BufferedItem]:
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
            if items:
                # The items are the unclaimed rows from the first seq to the last (in either order), all
                # of them: one statement claims them (the write lock is held since the SELECT).
                low, high = sorted((items[0].seq, items[-1].seq))
                con.execute(
                    "UPDATE buffered SET claimed_by = ?, attempts = attempts + 1, last_attempt_at = ? "
                    "WHERE claimed_by IS NULL AND seq BETWEEN ? AND ?",
                    (self.owner, now, low, high),
                )
            return items

        return self._taking(work)

    def settle(self, *, done: Iterable[int], rejected: Iterable[RejectionNote], now: float) -> None:
        """Delete delivered items and move rejected ones to the rejected log, in one transaction.

        Only rows this sender still claims are touched, so a row another sender took over stays put.
        """
        done = list(done)
        rejected = list(rejected)

        def work(con: sqlite3.Connection) -> None:
            con.executemany(
                "INSERT INTO rejected (event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts, "
                "size) SELECT event_id, body, ?, ?, ?, enqueued_at, ?, attempts, size FROM buffered "
                "WHERE seq = ? AND claimed_by = ?",
                [(r.reason, r.message, r.origin, now, r.seq, self.owner) for r in rejected],
            )
            # One statement for the batch, its seqs as one JSON array.
            con.execute(
                "DELETE FROM buffered WHERE claimed_by = ? AND seq IN (SELECT value FROM json_each(?))",
                (self.owner, json.dumps([*done, *(r.seq for r in rejected)])),
            )
            if rejected:
                self._trim_rejected_bytes(con)

        self._taking(work)
        if self.disk_full is not None and self.count() == 0:  # drained: room again (not before: the
            self._give_back_space()                           # WAL given back would be needed again)
            self._keep_reserve()

    def release_all(self) -> int:
        """Give back every claim this sender holds (after a failed or partly answered request)."""
        return self._taking(lambda con: con.execute(
            "UPDATE buffered SET claimed_by = NULL WHERE claimed_by = ?", (self.owner,)).rowcount)

    def note_sender(self, values: dict[str, str | None]) -> None:
        if self.disk_full is not None:
            return  # a note is for people: no space spent on it while the disk is full
        with self._write(durable=False) as con:
            con.executemany(
                "INSERT INTO sender_state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )

    # -- reading ------------------------------------------------------------------------------

    def count(self) -> int:
        with self._lock:
            events: int = self._con.execute("SELECT events FROM totals WHERE id = 1").fetchone()[0]
            return events

    def unclaimed(self) -> int:
        with self._lock:
            unclaimed: int = self._con.execute("SELECT count(*) FROM buffered WHERE claimed_by IS NULL").fetchone()[0]
            return unclaimed

    def items(self) -> list[BufferedItem]:
        with self._read() as con:
            rows = con.execute(
                "SELECT seq, event_id, body, size, enqueued_at, attempts FROM buffered ORDER BY seq"
            ).fetchall()
        return [BufferedItem(*row) for row in rows]

    def rejected(self, *, reason: str | None = None, limit: int | None = None) -> list[RejectedItem]:
        """The rejected log, newest first."""
        sql = ("SELECT seq, event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts, size, digest "
               "FROM rejected")
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
            events, size, rejected_bytes = con.execute(
                "SELECT events, bytes, rejected_bytes FROM totals WHERE id = 1").fetchone()
            oldest = con.execute("SELECT enqueued_at FROM buffered ORDER BY seq LIMIT 1").fetchone()
            rejected = con.execute("SELECT count(*) FROM rejected").fetchone()[0]
            notes = dict(con.execute("SELECT key, value FROM sender_state WHERE key IN "
                                     "('bus_rejections_dropped', 'rejected_dropped')").fetchall())
        free: int | None = None
        with contextlib.suppress(OSError):
            fs = os.statvfs(self.dir)
            free = fs.f_bavail * fs.f_frsize
        return BufferGauges(events, size, None if oldest is None else oldest[0], rejected,
                            int(notes.get("bus_rejections_dropped") or 0), rejected_bytes,
                            int(notes.get("rejected_dropped") or 0), self.disk_full is not None, free)

    def requeue_rejected(self, *, reason: str | None, now: float) -> int:
        """Put rejected events back in the buffer (after the API was fixed to accept them); returns how many.

        Bus rows stay: they hold a message as it came off the bus, not an event the API could take."""
        where, params = "WHERE origin <> 'bus'", []
        if reason is not None:
            where, params = where + " AND reason = ?", [reason]
        moving: int
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
