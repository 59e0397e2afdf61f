"""The collector stream: valid envelopes, faithful to the truth, lossy and duplicated as configured."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.core.verbs import verb_of
from tally_pipeline.providers.openstack.statuses import in_transition
from tally_pipeline.providers.simulated import EVENT_TYPES, DeliverySpec, ResourceKey, SimulationSpec, simulate


@pytest.fixture(scope="module")
def clean():
    return simulate(SimulationSpec(clouds=("a", "b"), hours=48, seed=21))


@pytest.fixture(scope="module")
def lossy():
    # A long, lossy run: enough lost creates and deletes that both are lost on some resources.
    spec = SimulationSpec(clouds=("a", "b"), hours=240, seed=4, delivery=DeliverySpec(loss=0.1, duplicates=0.05))
    return simulate(spec)


def key_of(event) -> ResourceKey:
    return ResourceKey(event["cloud"], event["resource_type"], event["resource_id"])


def test_every_generated_event_is_a_valid_envelope(lossy, registry) -> None:
    events = lossy.stream.generated()
    assert len(events) > 5000
    for event in events:
        result = validate_event(event, registry)
        assert isinstance(result, EventRecord), (event, result)
    assert len({e["event_id"] for e in events}) == len(events)


def test_the_real_openstack_event_types_are_used(clean) -> None:
    seen = Counter((e["resource_type"], e["event_type"]) for e in clean.stream.generated())
    for resource_type, types in EVENT_TYPES.items():
        for event_type in types:
            if event_type is not None:
                assert seen[(resource_type, event_type)] > 0, event_type
    assert verb_of("compute.instance.create.start") == "note"
    assert verb_of("image.activate") == "update"


def test_a_clean_stream_folded_naively_reproduces_every_lifecycle(clean) -> None:
    creates: dict[ResourceKey, list] = defaultdict(list)
    deletes: dict[ResourceKey, list] = defaultdict(list)
    updates: dict[ResourceKey, list] = defaultdict(list)
    delivered = clean.stream.delivered()
    assert len(delivered) == len(clean.stream.generated())  # no loss, no duplicates
    for event in delivered:
        verb = verb_of(event["event_type"])
        when = parse_rfc3339(event["occurred_at"])
        target = {"create": creates, "delete": deletes, "update": updates}.get(verb)
        if target is not None:
            target[key_of(event)].append((when, event["payload"]["size"]))
    assert len(creates) == len(clean.truth)
    for lc in clean.truth:
        first_create = min(creates[lc.key])
        assert first_create[0] == lc.created_at
        assert first_create[1] == lc.intervals[0].size
        last_delete = max(deletes[lc.key])[0] if deletes[lc.key] else None
        assert last_delete == lc.deleted_at
        assert sorted(updates[lc.key], key=lambda u: u[0]) == [(i.start, i.size) for i in lc.intervals[1:]]


def test_warm_resources_have_their_history_before_the_start(clean) -> None:
    warm = [lc for lc in clean.truth if lc.alive_at(clean.start)]
    assert warm
    history = {key_of(e) for e in clean.stream.delivered(until=clean.start)
               if verb_of(e["event_type"]) == "create"}
    late = [lc for lc in warm if lc.key not in history]
    # Only a create still in flight at the start (emitted shortly before it) may arrive after it.
    for lc in late:
        create = next(d for d in clean.stream.deliveries(cloud=lc.cloud)
                      if d.event["resource_id"] == lc.resource_id and verb_of(d.event["event_type"]) == "create")
        assert create.emitted_at < clean.start < create.delivered_at
    assert len(late) <= len(warm) * 0.1


def test_asynchronous_creates_are_announced_when_their_transition_ends(clean) -> None:
    checked = 0
    for delivery in clean.stream.deliveries():
        event = delivery.event
        if event["event_type"] not in ("compute.instance.create.end", "volume.create.end", "octavia.loadbalancer.create.end"):
            continue
        lc = clean.truth.get(key_of(event))
        assert parse_rfc3339(event["occurred_at"]) == lc.created_at
        assert lc.phases[0].at == lc.created_at and in_transition(lc.resource_type, lc.phases[0].status, lc.phases[0].task_state)
        shown = lc.phase_at(delivery.emitted_at)
        assert not in_transition(lc.resource_type, shown.status, shown.task_state)
        assert delivery.emitted_at > lc.created_at and delivery.delivered_at >= delivery.emitted_at
        checked += 1
    assert checked > 100


def test_delivery_windows_partition_the_stream(lossy) -> None:
    every = lossy.stream.deliveries()
    edges = [None] + [lossy.start + timedelta(minutes=10 * i) for i in range(-6, 241 * 6)] + [None]
    pieces = []
    for after, until in zip(edges, edges[1:]):
        window = lossy.stream.deliveries(after, until)
        for d in window:
            assert (after is None or d.delivered_at > after) and (until is None or d.delivered_at <= until)
        pieces.extend(window)
    assert pieces == every
    assert [d.delivered_at for d in every] == sorted(d.delivered_at for d in every)
    only_a = lossy.stream.deliveries(lossy.start, lossy.start + timedelta(hours=5), cloud="a")
    assert only_a and all(d.cloud == "a" for d in only_a)


def test_delivered_events_are_copies(clean) -> None:
    first = clean.stream.delivered()[0]
    first["payload"]["size"]["tampered"] = True
    assert "tampered" not in clean.stream.delivered()[0]["payload"]["size"]


def test_loss_and_duplication_follow_their_probabilities(lossy) -> None:
    stats = lossy.stream.stats()
    assert stats.events_generated > 5000
    assert abs(stats.events_lost / stats.events_generated - 0.10) < 0.015
    delivered_once = stats.events_generated - stats.events_lost
    assert abs(stats.events_duplicated / delivered_once - 0.05) < 0.012
    assert stats.deliveries == delivered_once + stats.events_duplicated
    resources = len(lossy.truth)
    deleted = sum(1 for lc in lossy.truth if lc.deleted_at is not None)
    assert abs(stats.creates_lost / resources - 0.10) < 0.03
    assert abs(stats.deletes_lost / deleted - 0.10) < 0.03
    # All three kinds of gap occur: a lost create, a lost delete, both lost on one resource.
    assert stats.creates_lost > stats.both_lost > 0 and stats.deletes_lost > stats.both_lost


def test_lost_counts_match_what_never_arrived(lossy) -> None:
    arrived: dict[str, set[ResourceKey]] = defaultdict(set)
    for d in lossy.stream.deliveries():
        arrived[verb_of(d.event["event_type"])].add(key_of(d.event))
    all_keys = {lc.key for lc in lossy.truth}
    deleted_keys = {lc.key for lc in lossy.truth if lc.deleted_at is not None}
    assert lossy.stream.lost_creates == all_keys - arrived["create"]
    assert lossy.stream.lost_deletes == deleted_keys - arrived["delete"]
    assert lossy.stream.lost_both == lossy.stream.lost_creates & lossy.stream.lost_deletes
    firsts = [d for d in lossy.stream.deliveries() if not d.duplicate]
    stats = lossy.stream.stats()
    assert stats.events_lost == len(lossy.stream.generated()) - len(firsts)
    generated_updates = sum(1 for e in lossy.stream.generated() if verb_of(e["event_type"]) == "update")
    arrived_updates = sum(1 for d in firsts if verb_of(d.event["event_type"]) == "update")
    assert stats.updates_lost == generated_updates - arrived_updates > 0
    per_cloud = lossy.stream.stats("a")
    assert per_cloud.creates_lost == len(lossy.stream.lost("create", "a")) < lossy.stream.stats().creates_lost


def test_a_duplicate_repeats_its_event_exactly_and_later(lossy) -> None:
    first_copy = {}
    duplicates = 0
    for d in lossy.stream.deliveries():
        event_id = d.event["event_id"]
        if d.duplicate:
            assert first_copy[event_id].event == d.event
            assert d.delivered_at >= first_copy[event_id].delivered_at
            duplicates += 1
        else:
            assert event_id not in first_copy
            first_copy[event_id] = d
    assert duplicates == lossy.stream.stats().events_duplicated > 0


def test_delays_reorder_and_keep_a_tail_of_minutes(lossy) -> None:
    firsts = [d for d in lossy.stream.deliveries(cloud="a") if not d.duplicate]
    delays = sorted((d.delivered_at - d.emitted_at).total_seconds() for d in firsts)
    assert delays[len(delays) // 2] < 5  # mostly seconds
    assert sum(1 for x in delays if x >= 60) > 0.005 * len(delays)  # a tail of minutes
    emitted = [d.emitted_at for d in firsts]
    assert emitted != sorted(emitted)  # arrival order differs from emission order


def test_without_reorder_first_copies_arrive_in_emission_order() -> None:
    sim = simulate(SimulationSpec(hours=24, seed=8, delivery=DeliverySpec(reorder=False, delay_tail_probability=0.1)))
    firsts = [d for d in sim.stream.deliveries() if not d.duplicate]
    emitted = [d.emitted_at for d in firsts]
    assert emitted == sorted(emitted)
    assert all(d.delivered_at >= d.emitted_at for d in firsts)
