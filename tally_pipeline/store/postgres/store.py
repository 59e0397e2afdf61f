"""The production store: PostgreSQL through psycopg 3 and a connection pool.

New events are copied straight into ``events`` (text COPY, streamed while the ingest core is still
validating the batch). While the store's recent batches held nothing already stored, a batch is
copied without asking first (the dedup index is probed by the insert anyway); after one that did,
the next batches first ask which of their ids are held and copy only the rest. When the copy meets
a held id (a resend, or a racing writer that took it first), the batch falls back to staging its
rows and one INSERT … ON CONFLICT DO NOTHING. Rows always go in (cloud, event_id) order, so two
writers racing overlapping batches lock them in the same order and never deadlock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from itertools import chain, islice
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import PyFormat, Transformer
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from tally_pipeline.core.envelope import EventRecord
from tally_pipeline.redaction import redact
from tally_pipeline.store.base import (
    EventKey,
    RejectedRow,
    Store,
    StoreUnavailable,
    TransientConflict,
    UnitOfWork,
)
from tally_pipeline.store.errors import Rule, map_exceptions
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for
from tally_pipeline.store.postgres.locks import INGEST_LOCK, MIGRATION_LOCK
from tally_pipeline.store.postgres.projection import PostgresProjectionTables, stable_high_water
from tally_pipeline.store.postgres.resource_key import resource_filter
from tally_pipeline.store.postgres.usage_sql import PostgresUsageSQL
from tally_pipeline.store.projection_tables import full_interval_rows, pending

_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS _ingest_stage (
    event_id TEXT, event_type TEXT, verb TEXT, cloud TEXT, resource_type TEXT, resource_id TEXT,
    project_id TEXT, occurred_at TIMESTAMPTZ, source TEXT, payload TEXT, content_hash TEXT
) ON COMMIT DELETE ROWS
"""

T = TypeVar("T")


# While the server looks up which ids are held, this process validates the first records, so that
# the copy starts with rows in hand: one in this many, about as long as the lookup takes (an id
# costs the server a fifth of the time it takes to validate an event here).
_VALIDATE_AHEAD_ONE_IN = 5

# An event's dedup key as the events_dedup_key constraint hashes it (migration 0011): a lookup by
# (cloud, event_id) reaches the index only through this exact expression, and then compares the
# columns themselves too.
def _dedup_key(cloud: str, event_id: str) -> str:
    return f"octet_length({cloud})::text || ':' || {cloud} || {event_id}"


def _same_event(alias: str, cloud: str, event_id: str) -> str:
    """SQL: row ``alias`` of events is the event (cloud, event_id), found through the dedup index."""
    return (f"{_dedup_key(f'{alias}.cloud', f'{alias}.event_id')} = {_dedup_key(cloud, event_id)} "
            f"AND {alias}.cloud = {cloud} AND {alias}.event_id = {event_id}")


def _probe_events(keys: str, columns: str, cloud: str, event_id: str) -> str:
    """SQL: ``keys`` (a row source), each joined to the held event it names, if any (``columns`` of it, as ``e``).

    One dedup-index probe per key, however the planner estimates the key: as a plain join, a log
    not yet analysed (a new database's first minutes) is hash-joined by a scan of all of it.
    """
    return (f"{keys} CROSS JOIN LATERAL (SELECT {columns} FROM events e "
            f"WHERE {_same_event('e', cloud, event_id)} LIMIT 1) e")


def _options_with_jit_off(url: str) -> str:
    """The URL's own server ``options`` (a scratch store's search_path, say), plus ``jit=off``."""
    try:
        own = conninfo_to_dict(url).get("options") or ""
    except psycopg.Error:  # a malformed URL: connecting fails with the store's own (redacted) error
        own = ""
    return f"{own} -c jit=off".strip()


# Every value of an event row goes as text (the timestamps pre-formatted): see ``_copy``.
_EVENT_COPY_TYPES = ["text"] * 12


def _key(record: EventRecord) -> EventKey:
    return (record.cloud, record.event_id)


#: psycopg's errors as the store's: transient conflicts are retried, lost connections are 503s.
#: Deadlocks and serialization failures are OperationalErrors too, so they come first.
DRIVER_ERRORS: tuple[Rule, ...] = (
    (pg_errors.SerializationFailure, lambda exc: TransientConflict(str(exc))),
    (pg_errors.DeadlockDetected, lambda exc: TransientConflict(str(exc))),
    (psycopg.OperationalError, lambda exc: StoreUnavailable(f"PostgreSQL unavailable: {exc}")),
    (PoolTimeout, lambda exc: StoreUnavailable(f"PostgreSQL unavailable: {exc}")),
)


POOL_NAME = "tally"
_log = logging.getLogger(__name__)
# database (host:port/dbname) -> why it is unreachable, for every pool of this process: an outage is
# logged when it starts and when it ends, not on each of the pools' attempts (one a second or so per
# pool, and a Dagster sensor tick or step makes a pool of its own).
_outages: dict[str, str] = {}
_outages_lock = threading.Lock()


class _OneLinePerOutage(logging.Filter):
    """Drops psycopg_pool's per-attempt warnings for our pools: ``_Pool`` logs the outage's start and end."""

    def filter(self, record: logging.LogRecord) -> bool:
        per_attempt = record.msg in ("error connecting in %r: %s", "reconnection attempt in pool %r failed after %s sec")
        return not (per_attempt and isinstance(record.args, tuple) and record.args[:1] == (POOL_NAME,))


_pool_logger = logging.getLogger("psycopg.pool")
if not any(isinstance(f, _OneLinePerOutage) for f in _pool_logger.filters):
    _pool_logger.addFilter(_OneLinePerOutage())


def _target(url: str) -> str:
    """``host:port/dbname`` of a URL (never its credentials); a URL libpq cannot parse is named as such."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unparseable URL)"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


class _Pool(ConnectionPool):
    """A pool that remembers why its latest connection attempt failed (the driver's own message, e.g.
    ``permission denied for database``): the pool makes connections in the background and only logs
    their errors, so a caller timing out waiting for one would otherwise learn only that it waited.
    It logs an outage once when it starts (the cause) and once when it ends."""

    last_error: str | None = None
    target = ""  # host:port/dbname, set by the store

    def _connect(self, timeout: float | None = None) -> psycopg.Connection:
        target = self.target
        try:
            conn = super()._connect(timeout)
        except psycopg.Error as exc:
            self.last_error = " ".join(str(exc).split())  # one line: libpq's message spans several
            with _outages_lock:
                started = target not in _outages
                _outages[target] = self.last_error
            if started:
                _log.warning(redact(f"PostgreSQL {target} unreachable: {self.last_error} (retrying; logged again "
                                    "when it answers)"))
            raise
        self.last_error = None
        with _outages_lock:
            ended = _outages.pop(target, None) is not None
        if ended:
            _log.warning(f"PostgreSQL {target} answers again")
        return conn


# After a batch met an id already held, this many of the store's next batches ask first.
_ASK_FIRST_FOR = 32


class HeldRecently:
    """Whether a store's recent batches met ids it already held: resends come in runs (a collector
    redelivering after a crash, a sync re-reading what it wrote), and inside a run asking first
    (one lookup) is cheaper than a copy that fails and is redone. Outside one, asking costs more
    than it saves: the copy's own unique index probe finds the rare resend. Shared by the store's
    threads without a lock: a lost update only changes which path a batch takes, never its outcome.
    """

    def __init__(self) -> None:
        self.remaining = 0

    def met(self) -> None:
        self.remaining = _ASK_FIRST_FOR

    def ask_first(self) -> bool:
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


class PostgresUnitOfWork(UnitOfWork):
    def __init__(self, conn: psycopg.Connection, held_recently: HeldRecently | None = None):
        self.conn = conn
        self.cur = conn.cursor()
        self.held_recently = held_recently or HeldRecently()

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> psycopg.Cursor:
        return self.cur.execute(sql, params)

    def pipelined(self) -> AbstractContextManager[object]:
        return self.conn.pipeline()

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self.cur.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(sql, rows)

    def insert_events(self, records: Sequence[EventRecord], received_at: datetime) -> set[EventKey]:
        """Store the records whose (cloud, event_id) is new (see ``insert_event_stream``)."""
        ordered = sorted(records, key=_key)
        return self.insert_event_stream([_key(r) for r in ordered], ordered, received_at)

    def insert_event_stream(
        self, keys: Sequence[EventKey], records: Iterable[EventRecord], received_at: datetime,
        meanwhile: Callable[[], None] | None = None,
    ) -> set[EventKey]:
        """Store the records whose (cloud, event_id) is new, copying each as it arrives.

        The fast path copies the new rows straight into ``events`` (after asking which of
        ``keys`` are already held, when recent batches met some: see ``HeldRecently``); the server
        inserts rows while the caller is still producing (validating) the next ones. A held id
        not asked for, or one a racing writer took first, makes the copy fail on the dedup key;
        the batch then rolls back to a savepoint and takes the slow path, a staged ``INSERT … ON
        CONFLICT DO NOTHING``. Either way rows go in key order, so racing writers lock in the
        same order. ``meanwhile`` runs after the last row is written, while the server still
        inserts the rows it has not reached (it trails the writer by a few milliseconds).
        """
        if next(iter(records), None) is None:
            return set()  # nothing valid: no lock, no query
        if self.held_recently.ask_first():
            held = self._look_up_held(keys, records)
            if held:
                self.held_recently.met()
        else:
            held = set()
            self._open_copy()
        fresh = (r for r in records if (r.cloud, r.event_id) not in held) if held else iter(records)
        first = next(fresh, None)
        if first is None:
            return set()
        written: list[EventRecord] = []
        try:
            self._copy(chain((first,), fresh), received_at, written, meanwhile)
        except (pg_errors.UniqueViolation, pg_errors.ExclusionViolation):
            self.held_recently.met()
            self.cur.execute("ROLLBACK TO SAVEPOINT ingest_copy")
            return self._insert_staged([r for r in records if (r.cloud, r.event_id) not in held], received_at)
        return {(r.cloud, r.event_id) for r in written}

    def _open_copy(self) -> None:
        """Take the ingest lock (shared) and set the savepoint the fallback rolls back to, in one round trip."""
        with self.conn.pipeline():
            self.cur.execute("SELECT pg_advisory_xact_lock_shared(%s)", (INGEST_LOCK,))
            self.conn.execute("SAVEPOINT ingest_copy")

    def _look_up_held(self, keys: Sequence[EventKey], records: Iterable[EventRecord]) -> set[EventKey]:
        """Take the ingest lock (shared), set the savepoint, and return which keys are stored already.

        Both statements go in one pipeline, and while the server looks the ids up this process
        validates the first records (walking ``records`` validates them).
        """
        with self.conn.pipeline():
            # The keys go as one JSON array of [cloud, id] pairs: psycopg quotes a Python list into
            # an array literal element by element, which costs more than the lookup. Every id and
            # cloud is UTF-8 without NUL. Each held key comes back as one JSON text.
            lookup = self.cur.execute(
                "SELECT pg_advisory_xact_lock_shared(%s), ARRAY(SELECT json_build_array(e.cloud, e.event_id)::text "
                "FROM " + _probe_events("json_array_elements(%s::json) AS k", "e.cloud, e.event_id",
                                        "(k ->> 0)", "(k ->> 1)") + ")",
                (INGEST_LOCK, orjson.dumps(keys).decode()),
            )
            # A savepoint the fallback can roll back to. It is not released on success: COMMIT
            # ends it anyway, and RELEASE would cost a round trip per batch.
            self.conn.execute("SAVEPOINT ingest_copy")
            for _ in islice(records, len(keys) // _VALIDATE_AHEAD_ONE_IN):
                pass
        row = lookup.fetchone()
        return {tuple(orjson.loads(pair)) for pair in (row[1] if row is not None else None) or ()}

    def _copy(self, records: Iterator[EventRecord], received_at: datetime, written: list[EventRecord],
              meanwhile: Callable[[], None] | None = None) -> None:
        """Copy each record into ``events`` as it comes, appending it to ``written``; then run
        ``meanwhile`` before waiting for the server to finish."""
        # Text COPY, not binary, so that the work overlaps: the server inserts a text COPY's rows
        # every 64 kB of input, but holds a binary COPY's rows until it has 1000 of them, i.e. the
        # whole batch, while this process is still validating. The text of a row is as cheap to
        # make as its binary form once the timestamps are text already: occurred_at's from
        # validation, received_at formatted once here.
        received = self._timestamptz_text(received_at)
        with self.cur.copy(
            "COPY events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
            "occurred_at, source, payload, content_hash, received_at) FROM STDIN"
        ) as copy:
            copy.set_types(_EVENT_COPY_TYPES)
            write_row = copy.write_row
            for r in records:
                written.append(r)
                write_row(
                    (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id, r.project_id,
                     r.occurred_at_iso(), r.source, r.payload_json, r.content_hash,
                     received)
                )
            if meanwhile is not None:
                meanwhile()

    def _timestamptz_text(self, value: datetime) -> str:
        """``value`` as psycopg itself would write it into a text COPY."""
        dumper = Transformer.from_context(self.cur).get_dumper(value, PyFormat.TEXT)
        dumped = dumper.dump(value)
        assert dumped is not None  # a datetime always has a text form
        return bytes(dumped).decode()

    def _insert_staged(self, records: Sequence[EventRecord], received_at: datetime) -> set[EventKey]:
        cur = self.cur
        cur.execute(_STAGE)
        with cur.copy(
            "COPY _ingest_stage (event_id, event_type, verb, cloud, resource_type, resource_id, "
            "project_id, occurred_at, source, payload, content_hash) FROM STDIN"
        ) as copy:
            for r in records:
                copy.write_row(
                    (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id,
                     r.project_id, r.occurred_at, r.source, r.payload_json, r.content_hash)
                )
        rows = cur.execute(
            """
            INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id,
                                project_id, occurred_at, source, payload, content_hash, received_at)
            SELECT event_id, event_type, verb, cloud, resource_type, resource_id,
                   project_id, occurred_at, source, payload::jsonb, content_hash, %s
            FROM _ingest_stage
            ORDER BY cloud, event_id
            ON CONFLICT DO NOTHING
            RETURNING cloud, event_id
            """,
            (received_at,),
        ).fetchall()
        cur.execute("TRUNCATE _ingest_stage")
        return {(row[0], row[1]) for row in rows}

    def note_activity(self, counts: dict[tuple[str, str], int], received_at: datetime) -> None:
        """As the base class does, but in one statement for the batch (one round trip, not one per cloud)."""
        if not counts:
            return
        per_cloud: dict[str, list[int]] = {}
        for (cloud, source), n in counts.items():
            pair = per_cloud.setdefault(cloud, [0, 0])
            pair[0 if source == "collector" else 1] += n
        clouds = sorted(per_cloud)  # rows lock in cloud order: no deadlocks between batches
        self.cur.execute(
            "INSERT INTO cloud_activity AS a (cloud, first_collector_event, last_collector_event, "
            "collector_events, reconciliation_events) "
            "SELECT cloud, CASE WHEN n_collector > 0 THEN %(at)s END, CASE WHEN n_collector > 0 THEN %(at)s END, "
            "n_collector, n_reconciliation "
            "FROM unnest(%(clouds)s::text[], %(collector)s::bigint[], %(reconciliation)s::bigint[]) "
            "WITH ORDINALITY AS c (cloud, n_collector, n_reconciliation, position) ORDER BY position "
            "ON CONFLICT (cloud) DO UPDATE SET "
            "first_collector_event = coalesce(a.first_collector_event, excluded.first_collector_event), "
            "last_collector_event = coalesce(excluded.last_collector_event, a.last_collector_event), "
            "collector_events = a.collector_events + excluded.collector_events, "
            "reconciliation_events = a.reconciliation_events + excluded.reconciliation_events",
            {
                "at": received_at,
                "clouds": clouds,
                "collector": [per_cloud[c][0] for c in clouds],
                "reconciliation": [per_cloud[c][1] for c in clouds],
            },
        )

    def content_hashes(self, keys: Sequence[EventKey]) -> dict[EventKey, str]:
        if not keys:
            return {}
        rows = self.cur.execute(
            "SELECT e.cloud, e.event_id, e.content_hash FROM "
            + _probe_events("unnest(%s::text[], %s::text[]) AS k (cloud, event_id)",
                            "e.cloud, e.event_id, e.content_hash", "k.cloud", "k.event_id"),
            ([k[0] for k in keys], [k[1] for k in keys]),
        ).fetchall()
        return {(cloud, event_id): digest for cloud, event_id, digest in rows}

    def append_rejections(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        with self.cur.copy(
            "COPY rejected_events (received_at, reason, message, origin, cloud, event_id, raw) FROM STDIN"
        ) as copy:
            for r in rows:
                copy.write_row((received_at, r.reason, r.message, r.origin, r.cloud, r.event_id, r.raw))


class PostgresStore(Store):
    dialect = "postgres"
    streams_events = True
    parallel_writes = True

    def __init__(
        self,
        url: str,
        *,
        migrate: bool = False,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
        retry_budget_s: float = 30.0,
        reconnect_timeout: float = 3.0,
    ):
        self.url = url
        self.retry_budget_s = retry_budget_s
        self.held_recently = HeldRecently()
        self.pool = _Pool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            # A connection that died with the server is found and replaced before it is handed out.
            check=ConnectionPool.check_connection,
            # psycopg_pool retries a failed connection with doubling delays for reconnect_timeout
            # (default 5 min), so after a long outage it would find the server back only minutes late;
            # giving up early lets the next request start a fresh attempt at once.
            reconnect_timeout=reconnect_timeout,
            # JIT compilation off: our statements are index probes, where the compile alone costs
            # more than the query (on a log not yet analysed the planner's guesses cross
            # jit_above_cost: 136 ms of a 148 ms held-id lookup of 1,000 keys at 2M events), or the
            # fold, which measured slower with it.
            kwargs={"connect_timeout": max(1, int(timeout)), "options": _options_with_jit_off(url)},
            name=POOL_NAME,
        )
        self.pool.target = _target(url)
        self.pool.open(wait=False)
        if migrate:
            self.migrate()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        try:
            with map_exceptions(DRIVER_ERRORS), self.pool.connection() as conn:
                yield conn
        except StoreUnavailable as exc:
            waited, why = exc.__cause__, self.pool.last_error
            if not isinstance(waited, PoolTimeout) or why is None:
                raise
            # The cause first (redacted), then how long the caller waited.
            raise StoreUnavailable(f"PostgreSQL unavailable: {redact(why)} ({waited})") from waited

    @contextmanager
    def unit_of_work(self) -> Iterator[PostgresUnitOfWork]:
        with self.connection() as conn:
            with conn.transaction():
                yield PostgresUnitOfWork(conn, self.held_recently)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            return conn.execute(sql, list(params) or None).fetchall()

    def query_chunks(self, sql: str, params: Sequence[Any] = (), size: int = 1000) -> Generator[list[tuple[Any, ...]], None, None]:
        # A server-side cursor in a transaction of its own: the server plans for the first rows
        # (cursor_tuple_fraction) and sends each chunk when it is fetched.
        with self.connection() as conn, conn.transaction(), conn.cursor(name="tally_query_chunks") as cur:
            cur.execute(sql, list(params) or None)
            while rows := cur.fetchmany(size):
                yield rows

    def resource_events_filter(self, key: tuple[str, str, str]) -> tuple[str, list[Any]]:
        return resource_filter(key)

    def usage_sql(self) -> PostgresUsageSQL:
        return PostgresUsageSQL()

    def with_projection_tables(self, work: Callable[[PostgresProjectionTables], T], *, full: bool) -> T | None:
        # A refresh with nothing pending takes no lock: the sequence and the watermark tell.
        if not full and not pending(self):
            return None
        high = self.run(stable_high_water)
        return self.run(lambda uow: work(PostgresProjectionTables(uow, high)))

    def load_intervals(self, rows: Sequence[tuple[Any, ...]]) -> None:
        # the high-water mark only bounds the projection's reads; the writer does not use it
        self.run(lambda uow: PostgresProjectionTables(uow, high=0).replace([], [], full_interval_rows(rows)))
        # statistics for the statements that join the intervals next (a fresh table has none)
        self.run(lambda uow: uow.execute("ANALYZE resource_intervals"))

    def applied_migrations(self) -> list[str]:
        with self.connection() as conn:
            conn.execute(MIGRATIONS_TABLE)
            return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY version")]

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(MIGRATIONS_TABLE)
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for migration in migrations_for(self.dialect):
                if migration.version in done:
                    continue
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.name)
        return applied

    def close(self) -> None:
        self.pool.close()
