"""Driver errors are translated once, in the store: callers see only the store's error classes."""

from __future__ import annotations

import duckdb
import psycopg
import pytest

from tally_pipeline.bench.post import bench_post
from tally_pipeline.store import StoreError, StoreUnavailable, open_store
from tally_pipeline.store.errors import TransactionFailed, TransientConflict, map_exceptions
from tally_pipeline.store.scratch import scratch_store


def test_a_transaction_duckdb_refuses_is_a_store_error_and_nothing_is_committed(tmp_path) -> None:
    store = open_store(f"duckdb://{tmp_path / 'refuse.duckdb'}")
    store.run(lambda uow: uow.execute("CREATE TABLE t (x INTEGER)"))

    def refused(uow) -> None:
        uow.execute("INSERT INTO t VALUES (1)")
        uow.execute("BEGIN TRANSACTION")  # DuckDB refuses a transaction inside a transaction

    with pytest.raises(TransactionFailed) as caught:
        store.run(refused)
    assert isinstance(caught.value.__cause__, duckdb.TransactionException)
    assert store.query("SELECT count(*) FROM t") == [(0,)]
    store.close()


def test_rules_apply_in_order_and_leave_unclaimed_errors_alone() -> None:
    rules = (
        (psycopg.errors.DeadlockDetected, lambda exc: TransientConflict(str(exc))),
        (psycopg.OperationalError, lambda exc: StoreUnavailable(str(exc))),
        (ValueError, lambda exc: None),  # declines: the error passes as it was
    )
    with pytest.raises(TransientConflict), map_exceptions(rules):
        raise psycopg.errors.DeadlockDetected("deadlock")  # an OperationalError too: the first rule wins
    with pytest.raises(StoreUnavailable), map_exceptions(rules):
        raise psycopg.OperationalError("gone")
    with pytest.raises(ValueError), map_exceptions(rules):
        raise ValueError("a row's data")


def test_the_post_benchmark_reports_an_unreachable_server_as_the_store_error() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        bench_post("postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=1", 3)
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_a_scratch_schema_is_empty_migrated_and_dropped(pg_url) -> None:
    with open_store(pg_url, migrate=True) as target:
        target.run(lambda uow: uow.execute("INSERT INTO usage_checkpoints (cloud, project_id, meter) VALUES ('c', 'p', 'm')"))
        with scratch_store(pg_url) as scratch:
            assert scratch.query("SELECT count(*) FROM usage_checkpoints") == [(0,)]
            schema = scratch.query("SELECT current_schema()")[0][0]
            assert schema.startswith("tally_bench_")
            # the store's own server options (no JIT) join the URL's search_path, not replace it
            assert scratch.query("SHOW jit") == [("off",)]
        assert target.query("SHOW jit") == [("off",)]
        assert target.query("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [schema]) == [(0,)]
        assert target.query("SELECT count(*) FROM usage_checkpoints") == [(1,)]
