"""Shared fixtures: stores on both backends, a fresh Postgres database per test session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import psycopg
import pytest

from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import Store, open_store

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin_dsn() -> str:
    return os.environ.get("TALLY_TEST_POSTGRES_DSN", DEFAULT_DSN)


def _with_dbname(dsn: str, dbname: str) -> str:
    """The same server as ``dsn`` (a postgresql:// URL or key=value string), another database, as a URL."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = quote(str(info.get("user", "postgres")))
    password = f":{quote(str(info['password']))}" if info.get("password") else ""
    host = info.get("host", "127.0.0.1")
    port = info.get("port", 5432)
    if str(host).startswith("/"):
        return f"postgresql://{user}{password}@/{dbname}?host={quote(str(host))}&port={port}"
    return f"postgresql://{user}{password}@{host}:{port}/{dbname}"


def _postgres_reachable() -> str | None:
    try:
        with psycopg.connect(admin_dsn(), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip()


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin DSN of the test server; skips (or fails under CI=true) when it does not answer."""
    problem = _postgres_reachable()
    if problem is not None:
        message = f"PostgreSQL not reachable at TALLY_TEST_POSTGRES_DSN ({problem})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return admin_dsn()


class PostgresDatabases:
    """Creates uniquely named databases on the test server; each is dropped after its test, on a thread of
    its own (a drop waits for a checkpoint: the next test runs meanwhile), and what is left at the end."""

    def __init__(self, admin: str):
        self.admin = admin
        self.created: list[str] = []
        self._dropper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drop-test-database")

    def create(self) -> str:
        name = f"tally_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return _with_dbname(self.admin, name)

    def drop_soon(self, url: str) -> None:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        self.created.remove(name)
        self._dropper.submit(self._drop, name)

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_all(self) -> None:
        self._dropper.shutdown(wait=True)
        for name in self.created:
            self._drop(name)
        self.created.clear()


@pytest.fixture(scope="session")
def pg_databases(postgres_server: str) -> Iterator[PostgresDatabases]:
    dbs = PostgresDatabases(postgres_server)
    yield dbs
    dbs.drop_all()


@pytest.fixture
def pg_url(pg_databases: PostgresDatabases) -> Iterator[str]:
    """A fresh, empty Postgres database for one test (migrations not applied), dropped after it."""
    url = pg_databases.create()
    yield url
    pg_databases.drop_soon(url)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A migrated store on a fresh Postgres database, closed after the test."""
    store = open_store(pg_url, migrate=True)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def registry():
    return default_registry()


@pytest.fixture(params=["duckdb", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database URL on each backend: a DuckDB file in tmp_path, or a fresh Postgres database."""
    if request.param == "duckdb":
        return f"duckdb://{tmp_path / 'tally.duckdb'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated store on each backend."""
    s = open_store(store_url, migrate=True)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def ingestor(store: Store, registry) -> Ingestor:
    """The ingest core on ``store``."""
    return Ingestor(store, registry)


# The longest tests start first: with two workers, a five-minute end-to-end test collected last would
# run alone at the end of the suite. Order only; every test still runs.
_LONGEST_FIRST = ("test_production_e2e.py", "test_dagster_daemon.py", "test_demo.py", "test_sync_route_dagster.py",
                  "test_sync_simulated.py", "test_dagster_webserver.py", "test_projection.py")


# The real OpenStack services (the realstack tier) load both cores while they come up: they start last, so
# the bring-up does not run beside the Dagster-process tests that start first.
_LAST = ("realstack",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whole modules move, so a module's fixtures are still set up once.
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if item.path.parent.name in _LAST:
            return len(_LONGEST_FIRST) + 1
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: the collection order within each rank
