"""``Store.query_chunks``: a query's rows a chunk at a time, the first before the rest are read (Postgres)."""

from __future__ import annotations

from contextlib import closing

import psycopg

from tally_pipeline.store.base import Store

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


def _listing_backends(watcher: psycopg.Connection) -> list[tuple[str, str]]:
    """(state, query) of the other sessions of this database that last touched the chunks' cursor."""
    return [(state, query) for state, query in watcher.execute(
        "SELECT state, query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND query ILIKE '%tally_query_chunks%'").fetchall()]


def test_postgres_hands_out_the_first_chunk_from_an_open_cursor_and_closing_ends_it(pg_store: Store, pg_url) -> None:
    with psycopg.connect(pg_url, autocommit=True) as watcher, \
            closing(pg_store.query_chunks(_NUMBERS, (100_000,), 1000)) as chunks:
        first = next(chunks)
        assert [row[0] for row in first] == list(range(1, 1001))
        # the rest are still on the server: a cursor open in a transaction, fetched a chunk at a time
        (state, query), = _listing_backends(watcher)
        assert state == "idle in transaction" and query.upper().startswith("FETCH")
        chunks.close()
        # closed early: the transaction is over and the connection back in the pool, usable
        assert [state for state, _ in _listing_backends(watcher)] in ([], ["idle"])
        assert pg_store.query("SELECT count(*) FROM pg_cursors") == [(0,)]
