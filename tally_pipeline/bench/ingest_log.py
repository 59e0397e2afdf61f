"""The SQL behind ``tally bench ingest``: pre-filling the log, the COPY baseline and index sizes.

A benchmark database is thrown away after the run: the pre-filled events are well-formed rows
(they validate, fold and bill like any other) but nobody sent them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from tally_pipeline.store.base import Store, UnitOfWork

# Resources are scattered over this many ids, named as the benchmark's Python side names them
# (``resource_uuid``): md5 of "r<n>" in uuid form, so pre-filled and measured events share them.
RESOURCE_SPACE = 4_000_000

# Rows per INSERT … SELECT while pre-filling: one statement per million keeps each transaction and
# its WAL bounded, and a progress line per chunk.
_PRELOAD_CHUNK = 1_000_000

_UUID_OF_MD5 = (
    "substr({h}, 1, 8) || '-' || substr({h}, 9, 4) || '-' || substr({h}, 13, 4) || '-' || "
    "substr({h}, 17, 4) || '-' || substr({h}, 21, 12)"
)

_COLUMNS = ("event_id, event_type, verb, cloud, resource_type, resource_id, project_id, occurred_at, "
            "source, payload, content_hash, received_at")

# One row per generated number g with a random resource r in [0, RESOURCE_SPACE): random uuid
# event ids, three clouds, a month of occurred_at, the payload shape the bench's events carry.
_PG_PRELOAD = f"""
INSERT INTO events ({_COLUMNS})
SELECT gen_random_uuid()::text, 'compute.instance.create.end', 'create', 'bench-' || mod(r, 3), 'instance',
       {_UUID_OF_MD5.format(h="md5('r' || r)")}, 'proj-' || mod(r, 97),
       timestamptz '2026-01-01 00:00:00+00' + random() * interval '30 days', 'collector',
       jsonb_build_object('size', jsonb_build_object('flavor_name', 'm1.small', 'vcpus', 1, 'ram_mb', 2048,
                                                     'disk_gb', 20),
                          'status', 'ACTIVE', 'host', 'cmp-' || mod(r, 50)),
       md5(g::text || clock_timestamp()::text), now()
FROM (SELECT g, floor(random() * {RESOURCE_SPACE})::bigint AS r FROM generate_series(1, %s) AS g) AS s
"""

_DUCK_PRELOAD = f"""
INSERT INTO events ({_COLUMNS})
SELECT uuid()::VARCHAR, 'compute.instance.create.end', 'create', 'bench-' || mod(r, 3), 'instance',
       {_UUID_OF_MD5.format(h="md5('r' || r)")}, 'proj-' || mod(r, 97),
       TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_microseconds(CAST(random() * 30 * 86400e6 AS BIGINT)),
       'collector',
       json_object('size', json_object('flavor_name', 'm1.small', 'vcpus', 1, 'ram_mb', 2048, 'disk_gb', 20),
                   'status', 'ACTIVE', 'host', 'cmp-' || mod(r, 50)),
       md5(g::VARCHAR || uuid()::VARCHAR), now()
FROM (SELECT range AS g, CAST(floor(random() * {RESOURCE_SPACE}) AS BIGINT) AS r FROM range(?)) AS s
"""


def _preload_chunk(uow: UnitOfWork, *, statement: str, n: int) -> None:
    uow.execute(statement, (n,))


def preload(store: Store, events: int, progress: Callable[[int], None] | None = None) -> None:
    """Add ``events`` generated events to the log in SQL (not through the ingest path)."""
    statement = _PG_PRELOAD if store.dialect == "postgres" else _DUCK_PRELOAD
    done = 0
    while done < events:
        n = min(_PRELOAD_CHUNK, events - done)
        store.run(functools.partial(_preload_chunk, statement=statement, n=n))
        done += n
        if progress is not None:
            progress(done)
    if store.dialect == "postgres":
        # Fresh statistics, as autovacuum would have them on a log that grew over weeks.
        store.run(lambda uow: uow.execute("ANALYZE events"))


def copy_rows(store: Store, rows: Sequence[tuple[Any, ...]]) -> None:
    """Bulk-load already-serialised event rows (``_COLUMNS`` order) into ``events`` itself.

    The baseline writes into the real table, so it pays for the same size and the same indexes as
    the ingest it is compared with. Postgres: COPY; DuckDB: an Arrow insert.
    """
    if store.dialect == "postgres":
        def load(uow: Any) -> None:
            with uow.cur.copy(f"COPY events ({_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

        store.run(load)
        return

    import pyarrow as pa

    names = [c.strip() for c in _COLUMNS.split(",")]
    table = pa.table({name: list(col) for name, col in zip(names, zip(*rows))})

    def load_duck(uow: Any) -> None:
        uow.con.register("_bench_rows", table)
        try:
            selected = ", ".join("payload::JSON" if n == "payload" else n for n in names)
            uow.con.execute(f"INSERT INTO events ({_COLUMNS}) SELECT {selected} FROM _bench_rows")
        finally:
            uow.con.unregister("_bench_rows")

    store.run(load_duck)


def events_footprint(store: Store) -> dict[str, Any]:
    """The log's rows and, on Postgres, the bytes of its heap and of each index, per event."""
    rows = store.event_count()
    out: dict[str, Any] = {"rows": rows}
    if store.dialect != "postgres":
        return out  # DuckDB reports no per-index size
    sizes = store.query(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = 'events'::regclass ORDER BY c.relname"
    )
    heap = store.query("SELECT pg_relation_size('events'), pg_total_relation_size('events')")[0]
    per = max(rows, 1)
    out["heap_bytes_per_event"] = round(heap[0] / per, 1)
    out["total_bytes"] = heap[1]
    out["index_bytes_per_event"] = {name: round(size / per, 1) for name, size in sizes}
    out["all_index_bytes_per_event"] = round(sum(size for _, size in sizes) / per, 1)
    return out
