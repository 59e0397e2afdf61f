"""Throw-away stores for benchmarks: a temporary DuckDB file, or a fresh schema on a Postgres server.

A benchmark pointed at a real database must never touch its tables, so it gets its own: the
schema is created here, reached through the URL's ``search_path``, and dropped afterwards.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from tally_pipeline.store import open_store
from tally_pipeline.store.base import Store
from tally_pipeline.store.errors import map_exceptions
from tally_pipeline.store.postgres.store import DRIVER_ERRORS


def _with_search_path(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _admin(url: str, statement: str) -> None:
    with map_exceptions(DRIVER_ERRORS), psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


@contextmanager
def scratch_store(url: str, *, keep: bool = False, prefix: str = "tally_bench") -> Iterator[Store]:
    """A migrated, empty store beside the database ``url`` names; removed on exit unless ``keep`` (Postgres)."""
    if url.startswith("duckdb://"):
        with tempfile.TemporaryDirectory(prefix=f"{prefix.replace('_', '-')}-") as tmp:
            store = open_store(f"duckdb://{Path(tmp) / 'bench.duckdb'}", migrate=True)
            try:
                yield store
            finally:
                store.close()
        return
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _admin(url, f'CREATE SCHEMA "{schema}"')
    try:
        store = open_store(_with_search_path(url, schema), migrate=True)
        try:
            yield store
        finally:
            store.close()
    finally:
        if not keep:
            _admin(url, f'DROP SCHEMA "{schema}" CASCADE')
