"""Fixtures of the usage and ledger tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tally_pipeline.store import Store, open_store


@pytest.fixture(params=["duckdb", "postgres"])
def quick_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """For property tests that run many examples: an in-memory DuckDB (opening a file per unit of
    work would dominate; the file-backed store runs the other tests) or a fresh Postgres database."""
    url = "duckdb://:memory:" if request.param == "duckdb" else request.getfixturevalue("pg_url")
    store = open_store(url, migrate=True)
    yield store
    store.close()
