"""Errors in a batch on Postgres: an entity the database refuses is isolated and skipped; a deadlock or
serialization failure is never swallowed. The database raises them for real, from a trigger."""

from __future__ import annotations

import psycopg
import pytest

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.store import StoreBusy
from tally_pipeline.store.base import TransientConflict
from tally_pipeline_tests.ledger_data import DAY, T0, Row, checkpoints, insert, posted_total, vm

PROJECTS = [f"p{n}" for n in range(6)]


@pytest.fixture
def pg_store(pg_store):
    """The root fixture's store, with one server per project."""
    insert(pg_store, *(Row(p, f"vm-{p}", T0 - DAY, None, vm()) for p in PROJECTS))
    return pg_store


def refuse_postings_for(store, project: str, sqlstate: str) -> None:
    """A trigger that makes the database reject postings of one project with ``sqlstate``."""
    store.run(
        lambda uow: uow.execute(
            f"""
            CREATE FUNCTION refuse_posting() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.project_id = '{project}' THEN
                    RAISE EXCEPTION 'postings for % are refused', NEW.project_id USING ERRCODE = '{sqlstate}';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_posting BEFORE INSERT ON ledger_postings
                FOR EACH ROW EXECUTE FUNCTION refuse_posting();
            """
        )
    )


def cycle(store, registry, **kwargs):
    return post_usage(store, registry, now=T0, ingest_lag=900, window_days=35, **kwargs)


def test_an_entity_the_database_refuses_is_isolated_reported_and_skipped(pg_store, registry) -> None:
    refuse_postings_for(pg_store, "p3", "P0001")  # raise_exception: an ordinary error
    result = cycle(pg_store, registry, batch_size=9)
    skipped = {(s.project_id, s.meter): s.reason for s in result.skipped}
    assert set(skipped) == {("p3", "instance_hours"), ("p3", "ram_gb_hours"), ("p3", "vcpu_hours")}
    assert all(r.startswith("error: RaiseException: postings for p3 are refused") for r in skipped.values())
    posted = posted_total(pg_store)
    assert {k.project_id for k in posted} == set(PROJECTS) - {"p3"}
    assert len(result.posted) == 15
    assert all(clamp is None for k, (_, clamp) in checkpoints(pg_store).items() if k.project_id == "p3")


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("sqlstate, error", [("40P01", psycopg.errors.DeadlockDetected), ("40001", psycopg.errors.SerializationFailure)])
def test_a_concurrency_error_aborts_the_batch_and_is_raised(pg_store, registry, sqlstate, error, workers) -> None:
    refuse_postings_for(pg_store, "p3", sqlstate)
    pg_store.retry_budget_s = 0  # the store would retry the batch; give it no time, so it raises
    with pytest.raises(StoreBusy) as caught:
        cycle(pg_store, registry, batch_size=6, workers=workers)  # p0–p1 | p2–p3 | p4–p5
    assert isinstance(caught.value.__cause__, TransientConflict)
    assert isinstance(caught.value.__cause__.__cause__, error)
    posted = {k.project_id for k in posted_total(pg_store)}
    # the batch before committed; the failing one left nothing. One worker starts no batch after
    # the failure; with two, the batch after may have been running already.
    assert {"p0", "p1"} <= posted and not posted & {"p2", "p3"}
    if workers == 1:
        assert posted == {"p0", "p1"}
    assert checkpoints(pg_store)[EntityKey("c1", "p2", "vcpu_hours")][1] is None
