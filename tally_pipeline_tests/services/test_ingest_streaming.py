"""Postgres ingest validates a batch while it copies it: the results are exactly those of validating
the whole batch first and then storing it (the same store with ``streams_events`` off)."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.envelope import EventRecord, Rejection, validate_event
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor, PreparedBatch
from tally_pipeline.store import open_store
from tally_pipeline.store.base import Store, TransientConflict, UnitOfWork
from tally_pipeline.store.postgres.store import _ASK_FIRST_FOR, PostgresStore, PostgresUnitOfWork
from tally_pipeline_tests.events import event
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.hostile import batches, odd_text

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_runs = itertools.count()


@pytest.fixture
def twins(pg_databases) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two migrated Postgres databases: one streaming, one validating each batch before it stores it."""
    stores = [open_store(pg_databases.create(), migrate=True) for _ in range(2)]
    stores[1].streams_events = False
    try:
        yield stores[0], stores[1]  # type: ignore[misc]
    finally:
        for s in stores:
            s.close()


def _wipe(store: Store) -> None:
    store.run(lambda uow: uow.execute("TRUNCATE events, rejected_events, cloud_activity, collector_type_activity RESTART IDENTITY"))


def _state(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Everything an ingest writes, as stored (seq and dead-letter ids in their order)."""
    return {
        "events": store.query(
            "SELECT seq, event_id, event_type, verb, cloud, resource_type, resource_id, project_id, occurred_at, "
            "source, payload::text, content_hash, received_at FROM events ORDER BY seq"),
        "dead letter": store.query(
            "SELECT id, received_at, reason, message, origin, cloud, event_id, raw FROM rejected_events ORDER BY id"),
        "activity": store.query("SELECT * FROM cloud_activity ORDER BY cloud"),
        "type activity": store.query("SELECT * FROM collector_type_activity ORDER BY cloud, resource_type"),
    }


def _variant(item: Any, n: int) -> Any:
    """An item sent again: as it was, or changed (a conflict when the change is valid)."""
    if not isinstance(item, dict) or n == 0:
        return item
    return {**item, "project_id": f"other-{n}"} if n == 1 else {**item, "cloud": "x-forbidden"}


def _may_write(cloud: str) -> bool:
    return not cloud.startswith("x-")


def _with_source(item: Any, reconciliation: bool) -> Any:
    return {**item, "source": "reconciliation"} if reconciliation and isinstance(item, dict) else item


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_streaming_ingest_gives_the_results_of_validating_first(twins, registry, data) -> None:
    fast, slow = twins
    for store in twins:
        _wipe(store)
    prefix = f"s{next(_runs)}"
    sources = data.draw(st.sampled_from([("collector",), ("collector", "reconciliation")]))
    first = [_with_source(item, data.draw(st.booleans())) for item in data.draw(batches(prefix), label="first")]
    again = [_variant(item, data.draw(st.integers(0, 2))) for item in data.draw(st.permutations(first))]
    new = data.draw(batches(prefix + "b"), label="second")
    second = again + new + [_variant(item, data.draw(st.integers(0, 2))) for item in new]  # conflicts in one batch
    for items in (first, second, first):
        got = Ingestor(fast, registry, clock=lambda: T0).ingest(items, origin="t", may_write=_may_write, sources=sources)
        want = Ingestor(slow, registry, clock=lambda: T0).ingest(items, origin="t", may_write=_may_write,
                                                                  sources=sources)
        assert got.as_json() == want.as_json()
    assert _state(fast) == _state(slow)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.dictionaries(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["collector", "reconciliation"])),
                                st.integers(1, 5), max_size=6), min_size=1, max_size=4))
def test_activity_in_one_statement_is_the_activity_of_one_per_cloud(twins, batches_of_counts) -> None:
    fast, slow = twins
    for store in twins:
        _wipe(store)
    for n, counts in enumerate(batches_of_counts):
        at = T0.replace(minute=n)
        fast.run(lambda uow, counts=counts, at=at: uow.note_activity(counts, at))
        slow.run(lambda uow, counts=counts, at=at: UnitOfWork.note_activity(uow, counts, at))
    assert _state(fast)["activity"] == _state(slow)["activity"]


@pytest.mark.parametrize("text", ["tab\there", "new\nline", "cr\rx", "back\\slash", "\\N", "\\.", "quote'\"", "é\U0001f600",
                                  "\u2028", " lead", "trail ", "a" * 200])
def test_odd_text_is_stored_exactly_as_validated(pg_url, registry, text) -> None:
    """Rows go to Postgres as COPY text: every escape must come back as the very string validated."""
    store = open_store(pg_url, migrate=True)
    try:
        item = event(event_id=text, resource_id=text, project_id=text,
                     payload={"size": {"flavor_name": text, "vcpus": 1, "ram_mb": 1, "disk_gb": 1}, text: [text]})
        record = validate_event(item, registry)
        assert isinstance(record, EventRecord)
        outcome = Ingestor(store, registry, clock=lambda: T0).ingest([item], origin="t")
        assert outcome.stored == 1
        row = store.query("SELECT event_id, resource_id, project_id, payload, content_hash, occurred_at, received_at "
                          "FROM events")[0]
        assert row == (text, text, text, json.loads(record.payload_json), record.content_hash, record.occurred_at, T0)
    finally:
        store.close()


@pytest.mark.parametrize("occurred_at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
                                         "2026-03-01T12:00:00.000001+00:00", "2026-03-01T13:00:00.5+01:00"])
def test_instants_are_stored_exactly(pg_url, registry, occurred_at) -> None:
    store = open_store(pg_url, migrate=True)
    try:
        item = event(occurred_at=occurred_at)
        record = validate_event(item, registry)
        assert isinstance(record, EventRecord)
        Ingestor(store, registry).ingest([item], origin="t")
        assert store.query("SELECT occurred_at FROM events")[0][0] == record.occurred_at
    finally:
        store.close()


def test_a_retried_unit_copies_each_event_once(pg_url, registry, monkeypatch) -> None:
    """A transient conflict after the copy retries the whole unit; the batch, half validated then
    finished, is walked again from its first record and nothing is validated or stored twice."""
    store = open_store(pg_url, migrate=True)
    calls = {"validate": 0, "activity": 0}
    real_note = PostgresUnitOfWork.note_activity

    def flaky_note(self: PostgresUnitOfWork, counts: dict, received_at: datetime) -> None:
        calls["activity"] += 1
        if calls["activity"] == 1:
            raise TransientConflict("simulated serialization failure")
        real_note(self, counts, received_at)

    real_validate = validate_event

    def counting_validate(item: Any, reg: SizeSchemaRegistry) -> Any:
        calls["validate"] += 1
        return real_validate(item, reg)

    monkeypatch.setattr(PostgresUnitOfWork, "note_activity", flaky_note)
    monkeypatch.setattr("tally_pipeline.services.ingest.validate_event", counting_validate)
    try:
        items = [event() for _ in range(300)] + [{"bogus": 1}]
        outcome = Ingestor(store, registry).ingest(items, origin="t")
        assert (outcome.stored, outcome.rejected, calls["validate"], calls["activity"]) == (300, 1, 301, 2)
        assert store.event_count() == 300 and len(store.rejected()) == 1
    finally:
        store.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["b", "a", "c", "a"]), odd_text, st.integers()), max_size=12),
       st.lists(st.integers(0, 30), max_size=5))
def test_a_batch_hands_out_its_records_in_event_id_order_again_and_again(ids: list[Any], stops: list[int]) -> None:
    """``new_records`` restarts from the first record on every call, however far an earlier walk went,
    and the outcome lists end up in item order, the first valid occurrence of an id accepted."""
    items = [event(event_id=i) for i in ids]
    registry_ = default_registry()
    validated: list[int] = []

    def check(item: Any) -> EventRecord | Rejection:
        validated.append(id(item))
        return validate_event(item, registry_)

    batch = PreparedBatch(items, "t", check)
    for stop in stops:
        walked = list(itertools.islice(batch.new_records(), stop))
        assert walked == batch._new[:len(walked)]
    everything = list(batch.new_records())
    batch.finish()
    assert sorted(validated) == sorted(id(item) for item in items)  # each item validated exactly once
    assert [r.event_id for r in everything] == sorted(r.event_id for r in everything)
    assert everything == sorted((r for _, r in batch.accepted), key=lambda r: r.event_id)
    assert [i for i, _ in batch.accepted] == sorted(i for i, _ in batch.accepted)
    firsts: dict[str, int] = {}
    for index, item in enumerate(items):
        record = validate_event(item, registry_)
        if isinstance(record, EventRecord):
            firsts.setdefault(record.event_id, index)
    assert [i for i, _ in batch.accepted] == sorted(firsts.values())


def test_a_racing_writer_in_the_middle_of_a_streamed_copy_falls_back(pg_url, registry) -> None:
    """The server inserts a streamed text copy's rows as they come, so the key a racing writer holds
    can fail the copy half way through a large batch: the batch still rolls back to its savepoint
    and stores the rest through ON CONFLICT."""
    store = open_store(pg_url, migrate=True)
    holder = psycopg.connect(pg_url, application_name="racing-writer")
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        items = [event(event_id=f"mid-{i:04d}", resource_id=f"r-{i % 7}") for i in range(1000)]
        contested = items[600]
        result: dict[str, Any] = {}
        with holder.transaction():  # the racing writer's row, uncommitted until the block ends
            records = [r for _, r in Ingestor(store, registry).prepare([contested], origin="a").accepted]
            PostgresUnitOfWork(holder).insert_events(records, T0)
            writer = threading.Thread(target=lambda: result.setdefault(
                "b", Ingestor(store, registry).ingest(items, origin="b")))
            writer.start()
            wait_until(lambda: watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'COPY events%'"
            ).fetchall(), "the streamed copy to block on the contested key")
        writer.join(timeout=60)
        outcome = result["b"]
        assert [r.status for r in outcome.results] == ["stored"] * 600 + ["duplicate"] + ["stored"] * 399
        assert store.event_count() == 1000
    finally:
        holder.close()
        watcher.close()
        store.close()


def test_a_resend_after_quiet_batches_falls_back_and_the_next_batches_ask_first(pg_url, registry) -> None:
    """While nothing is resent a batch is copied without asking which ids are held. The first resend
    makes its copy fail on the dedup key and takes the staged path, with the same outcome; the
    store's next batches then ask first, until enough of them found nothing held."""
    store = open_store(pg_url, migrate=True)
    try:
        ingestor = Ingestor(store, registry)
        first = [event(event_id=f"quiet-{i:03d}") for i in range(200)]
        assert ingestor.ingest(first, origin="t").stored == 200
        assert store.held_recently.remaining == 0, "a store that met no held id copies straight away"

        resent = first[50:100] + [event(event_id=f"fresh-{i:03d}") for i in range(50)]
        outcome = ingestor.ingest(resent, origin="t")
        assert [r.status for r in outcome.results] == ["duplicate"] * 50 + ["stored"] * 50
        assert store.held_recently.remaining == _ASK_FIRST_FOR, "the failed copy was seen"

        for n in range(_ASK_FIRST_FOR):
            assert ingestor.ingest([event(event_id=f"after-{n:03d}")], origin="t").stored == 1
        assert store.held_recently.remaining == 0
        again = ingestor.ingest(first[:10], origin="t")
        assert again.duplicates == 10 and store.held_recently.remaining == _ASK_FIRST_FOR
        assert store.event_count() == 200 + 50 + _ASK_FIRST_FOR
    finally:
        store.close()


def test_a_stream_validates_the_next_batch_while_the_database_finishes_one(twins, registry, monkeypatch) -> None:
    """``ingest_stream`` validates part of the next batch before the batch in hand commits; the outcomes
    are still those of ingesting the batches one at a time (an id resent in a later batch is a
    duplicate of the committed one, a bad item is rejected in its own batch), and a unit retried
    after its copy reads and validates nothing twice."""
    streamed, one_by_one = twins
    one_by_one.streams_events = True
    items = [event(event_id=f"ahead-{i:04d}") for i in range(2500)]
    items[1500] = dict(items[10])  # a resend, one batch later
    items[2100] = {"bogus": 1}
    validations = {"n": 0, "at_first_activity": None}
    real_validate, real_note = validate_event, PostgresUnitOfWork.note_activity

    def counting_validate(item: Any, reg: SizeSchemaRegistry) -> Any:
        validations["n"] += 1
        return real_validate(item, reg)

    def noting(self: PostgresUnitOfWork, counts: dict, received_at: datetime) -> None:
        if validations["at_first_activity"] is None:
            validations["at_first_activity"] = validations["n"]
            raise TransientConflict("simulated serialization failure")
        real_note(self, counts, received_at)

    monkeypatch.setattr("tally_pipeline.services.ingest.validate_event", counting_validate)
    monkeypatch.setattr(PostgresUnitOfWork, "note_activity", noting)
    got = [o.as_json() for o in Ingestor(streamed, registry, clock=lambda: T0).ingest_stream(items, origin="t")]
    assert validations["at_first_activity"] is not None and validations["at_first_activity"] > 1000, \
        "part of the second batch was validated before the first one finished"
    assert validations["n"] == len(items), "each item validated once, the retried batch's and the next one's too"
    want = [Ingestor(one_by_one, registry, clock=lambda: T0).ingest(items[i:i + 1000], origin="t").as_json()
            for i in range(0, len(items), 1000)]
    assert got == want
    assert [o["stored"] for o in got] == [1000, 999, 499] and got[1]["duplicates"] == 1 and got[2]["rejected"] == 1
    # in the same order; the rolled-back try used up seq numbers, as any rolled-back insert does
    assert [row[1:] for row in _state(streamed)["events"]] == [row[1:] for row in _state(one_by_one)["events"]]
