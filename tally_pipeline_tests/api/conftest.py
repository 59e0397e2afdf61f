"""Fixtures of the API tests: a store shared by a module, apps served over a real socket, a private
PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tally_pipeline.store import Store, open_store
from tally_pipeline_tests.api.private_postgres import PrivatePostgres
from tally_pipeline_tests.collector_api import LoopbackServer


@pytest.fixture(params=["duckdb", "postgres"], scope="module")
def module_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """Both backends, one database per test module, DuckDB in memory: for modules making hundreds of
    requests whose tests don't depend on each other's writes (such a module names it ``store``)."""
    url = "duckdb://:memory:" if request.param == "duckdb" else request.getfixturevalue("pg_databases").create()
    with open_store(url, migrate=True) as store:
        yield store


@pytest.fixture
def serve_app() -> Iterator[Callable[[object], str]]:
    """``serve_app(app)`` serves an ASGI app with uvicorn in this process on a free loopback port and
    returns its base URL, listening already; every app served is stopped when the test ends."""
    with ExitStack() as servers:
        yield lambda app: servers.enter_context(LoopbackServer(app)).start().url


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started PostgreSQL server of the test's own, which it may stop and crash; removed at the end."""
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()
