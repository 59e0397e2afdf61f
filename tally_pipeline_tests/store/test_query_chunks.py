"""``Store.query_chunks``: a query's rows a chunk at a time, the first before the rest are read (Postgres)."""

from __future__ import annotations

from contextlib import closing

import psycopg

from tally_pipeline.store.base import Store
from tally_pipeline_tests.faults import cursor_sessions

_NUMBERS = "SELECT n, 'row ' || n FROM generate_series(1, %s) AS n ORDER BY n"
_DUCK_NUMBERS = "SELECT n, 'row ' || n FROM range(1, %s + 1) AS t(n) ORDER BY n"


def _numbers(store: Store) -> str:
    return _NUMBERS if store.dialect == "postgres" else _DUCK_NUMBERS


def test_chunks_hold_the_querys_rows_in_order_and_in_sizes(store: Store) -> None:
    sql = _numbers(store)
    chunks = list(store.query_chunks(sql, (2500,), 1000))
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert [tuple(row) for c in chunks for row in c] == [tuple(row) for row in store.query(sql, (2500,))]
    assert list(store.query_chunks(sql, (0,), 1000)) == []


def test_postgres_hands_out_the_first_chunk_from_an_open_cursor_and_closing_ends_it(pg_store: Store, pg_url) -> None:
    with psycopg.connect(pg_url, autocommit=True) as watcher, \
            closing(pg_store.query_chunks(_NUMBERS, (100_000,), 1000)) as chunks:
        first = next(chunks)
        assert [row[0] for row in first] == list(range(1, 1001))
        # the rest are still on the server: a cursor open in a transaction, fetched a chunk at a time
        (state, query), = cursor_sessions(watcher, "tally_query_chunks")
        assert state == "idle in transaction" and query.upper().startswith("FETCH")
        chunks.close()
        # closed early: the transaction is over and the connection back in the pool, usable
        assert [state for state, _ in cursor_sessions(watcher, "tally_query_chunks")] in ([], ["idle"])
        assert pg_store.query("SELECT count(*) FROM pg_cursors") == [(0,)]
