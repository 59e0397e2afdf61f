"""Nova's instance notifications, legacy, versioned or both, through ingest, the fold and the meters.

One instance lives through create, resize (finish, then revert), soft delete, restore, a second
soft delete and the reclaim's hard delete. The messages start from the official samples (nova's
``doc/notification_samples`` and ceilometer's legacy fixtures) with this instance's id, project,
flavors and times put in, as nova's own sample tests do. Nova has no legacy soft-delete or restore
sample: those are the legacy create sample with what nova's compute manager changes (``state``,
``deleted_at``; see the fixtures' SOURCES.md).

A billing operator expects: billed from the create, the new flavor from the resize's finish, the
old one again from the revert, nothing between a soft delete and its restore, nothing after the
second soft delete (the reclaim is no new end), and a cloud emitting both formats billed once.
"""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tally_pipeline.providers.openstack.notifications import Unmapped, map_notifications
from tally_pipeline.services import projection, queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.usage import cumulative_usage
from tally_pipeline_tests.providers.openstack.notification_samples import sample, versioned_sample

CLOUD = "region-one"
SERVER = "3f0c6a1e-8d2b-4c5a-9e7f-1a2b3c4d5e6f"
PROJECT = "cea4b25edb484e5392727181b7721d29"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
# Nova sends its two formats with two notifier calls: the versioned message is a few ms later.
LAG = timedelta(milliseconds=3)
# The API request comes before the launch (scheduling, image download): billing starts at the launch.
REQUEST = timedelta(seconds=7)
TINY = {"name": "m1.tiny", "vcpus": 1, "memory_mb": 512, "root_gb": 0}  # ceilometer's resize.revert.end sample
SMALL = {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20}  # its finish_resize.end sample

# (action, message time, payload instant or None, flavor, legacy state)
STEPS: list[tuple[str, datetime, datetime | None, dict[str, Any], str]] = [
    ("create", T0 + timedelta(seconds=40), T0, TINY, "active"),
    ("resize_finish", T0 + timedelta(hours=2), None, SMALL, "resized"),
    ("resize_revert", T0 + timedelta(hours=3), None, TINY, "active"),
    ("soft_delete", T0 + timedelta(hours=5, seconds=1), T0 + timedelta(hours=5), TINY, "soft-delete"),
    ("restore", T0 + timedelta(hours=8), None, TINY, "active"),
    ("soft_delete", T0 + timedelta(hours=9, seconds=1), T0 + timedelta(hours=9), TINY, "soft-delete"),
    # the reclaim, reclaim_instance_interval later: nova's destroy() sets deleted_at anew
    ("delete", T0 + timedelta(hours=10, seconds=1), T0 + timedelta(hours=10), TINY, "deleted"),
]
LEGACY_BASE = {
    "create": "nova/legacy/compute.instance.create.end.json",
    "resize_finish": "nova/legacy/compute.instance.finish_resize.end.json",
    "resize_revert": "nova/legacy/compute.instance.resize.revert.end.json",
    "soft_delete": "nova/legacy/compute.instance.create.end.json",
    "restore": "nova/legacy/compute.instance.create.end.json",
    "delete": "nova/legacy/compute.instance.delete.start.json",
}
LEGACY_TYPE = {
    "create": "compute.instance.create.end", "resize_finish": "compute.instance.finish_resize.end",
    "resize_revert": "compute.instance.resize.revert.end", "soft_delete": "compute.instance.soft_delete.end",
    "restore": "compute.instance.restore.end", "delete": "compute.instance.delete.end",
}
VERSIONED_SAMPLE = {
    "create": "instance-create-end", "resize_finish": "instance-resize_finish-end",
    "resize_revert": "instance-resize_revert-end", "soft_delete": "instance-soft_delete-end",
    "restore": "instance-restore-end", "delete": "instance-delete-end",
}


def _oslo(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")  # oslo.messaging's timestamp: naive UTC


def _nova_iso(when: datetime, action: str) -> str:
    # nova's null_safe_isotime: naive UTC with microseconds. The delete's deleted_at comes from the
    # database write on the compute host and keeps its fraction; the versioned format drops it.
    if action == "delete":
        when += timedelta(microseconds=811_111)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


def legacy_messages() -> list[dict[str, Any]]:
    out = []
    for n, (action, sent, dated, flavor, state) in enumerate(STEPS):
        message = copy.deepcopy(sample(LEGACY_BASE[action]))
        payload = message["payload"]
        payload.update(
            instance_id=SERVER, tenant_id=PROJECT, state=state, instance_type=flavor["name"], vcpus=flavor["vcpus"],
            memory_mb=flavor["memory_mb"], root_gb=flavor["root_gb"], disk_gb=flavor["root_gb"],
            # nova's str(created_at): the request, 7 s before the launch that starts billing
            created_at=str((T0 - REQUEST).replace(tzinfo=None)),
            launched_at=(T0 + timedelta(microseconds=985_999)).strftime("%Y-%m-%d %H:%M:%S.%f"),
            deleted_at=_nova_iso(dated, action) if dated and action != "create" else "",
            terminated_at=_nova_iso(dated, action) if dated and action == "delete" else "",
        )
        message.update(event_type=LEGACY_TYPE[action], message_id=f"legacy-{n}", timestamp=_oslo(sent))
        out.append(message)
    return out


def versioned_messages() -> list[dict[str, Any]]:
    out = []
    for n, (action, sent, dated, flavor, state) in enumerate(STEPS):
        instant = dated.strftime("%Y-%m-%dT%H:%M:%SZ") if dated and action != "create" else None
        out.append(versioned_sample(
            VERSIONED_SAMPLE[action], message_id=f"versioned-{n}", timestamp=_oslo(sent + LAG),
            uuid=SERVER, tenant_id=PROJECT, state=state,
            flavor={"nova_object.data": dict(flavor)}, created_at=(T0 - REQUEST).strftime("%Y-%m-%dT%H:%M:%SZ"),
            launched_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
            deleted_at=instant, terminated_at=instant if action == "delete" else None,
        ))
    return out


def ingest(store, registry, messages: list[dict[str, Any]]):
    envelopes, outcomes = map_notifications(messages, cloud=CLOUD)
    assert outcomes.as_dict()["invalid"] == {} and outcomes.mapped == len(messages)
    outcome = Ingestor(store, registry).ingest(envelopes, origin="test")
    projection.refresh(store)
    return outcome


def lifecycle(store) -> list[tuple[datetime, datetime | None, str, int]]:
    rows = queries.lifecycle(store, CLOUD, "instance", SERVER) or []
    return [(r["start"], r["end"], r["size"]["flavor_name"], r["lifecycle"]) for r in rows]


def usage(store, registry) -> dict[str, int]:
    totals = cumulative_usage(store, registry, T0 + timedelta(hours=12))
    assert not totals.unusable
    return {key.meter: micro for key, micro in totals.micro.items() if key[:2] == (CLOUD, PROJECT)}


def expected(lag: timedelta = timedelta(0)) -> list[tuple[datetime, datetime | None, str, int]]:
    """Billed from the create; small from the resize's finish; tiny from the revert to the soft
    delete; a new lifecycle from the restore to the second soft delete."""
    h = timedelta(hours=1)
    return [
        (T0, T0 + 2 * h + lag, "m1.tiny", 0),
        (T0 + 2 * h + lag, T0 + 3 * h + lag, "m1.small", 0),
        (T0 + 3 * h + lag, T0 + 5 * h, "m1.tiny", 0),
        (T0 + 8 * h + lag, T0 + 9 * h, "m1.tiny", 1),
    ]


def test_legacy_notifications_fold_to_the_nova_lifecycle(store, registry) -> None:
    outcome = ingest(store, registry, legacy_messages())
    assert (outcome.stored, outcome.duplicates, outcome.rejected) == (len(STEPS), 0, 0)
    assert lifecycle(store) == expected()
    # 6 instance-hours (2 + 1 + 2 + 1), all on one vCPU; RAM 0.5 GiB for 5 h and 2 GiB for 1 h.
    assert usage(store, registry) == {"instance_hours": 6_000_000, "vcpu_hours": 6_000_000, "ram_gb_hours": 4_500_000}


def test_versioned_notifications_fold_to_the_same_lifecycle(store, registry) -> None:
    outcome = ingest(store, registry, versioned_messages())
    assert (outcome.stored, outcome.duplicates, outcome.rejected) == (len(STEPS), 0, 0)
    assert lifecycle(store) == expected(LAG)  # the message-dated steps at the versioned message's time


@pytest.mark.parametrize("seed", [1, 2])
def test_a_cloud_emitting_both_formats_is_billed_once(store, registry, seed: int) -> None:
    both = legacy_messages() + versioned_messages()
    random.Random(seed).shuffle(both)  # delivery order is anyone's (two topics, two consumers)
    outcome = ingest(store, registry, both)
    # Payload-dated actions (create, both soft deletes, the delete) share one event id across the
    # formats and the same content: a plain duplicate, never a conflict. The message-dated ones
    # (resize finish and revert, restore) are stored twice, and the fold makes the later a no-op.
    assert (outcome.stored, outcome.duplicates, outcome.rejected) == (10, 4, 0)
    assert not any(r.conflict for r in outcome.results)
    assert lifecycle(store) == expected()
    assert usage(store, registry) == {"instance_hours": 6_000_000, "vcpu_hours": 6_000_000, "ram_gb_hours": 4_500_000}


def test_both_formats_bill_exactly_what_one_format_bills(store_url, tmp_path, registry) -> None:
    """Against the legacy-only billing of the same history, on a second store of the same backend."""
    from tally_pipeline.store import open_store

    one = open_store(f"duckdb://{tmp_path / 'legacy.duckdb'}", migrate=True)
    two = open_store(store_url, migrate=True)
    try:
        ingest(one, registry, legacy_messages())
        ingest(two, registry, versioned_messages() + legacy_messages())
        assert usage(two, registry) == usage(one, registry)
        assert lifecycle(two) == lifecycle(one)
    finally:
        one.close()
        two.close()


def test_a_redelivered_message_is_a_duplicate_in_either_format(store, registry) -> None:
    messages = legacy_messages()[:2] + versioned_messages()[1:2]
    ingest(store, registry, messages)
    again = ingest(store, registry, messages)
    assert (again.stored, again.duplicates) == (0, 3)
    assert not any(r.conflict for r in again.results)


def test_the_reclaim_of_a_soft_deleted_instance_bills_nothing_more(store, registry) -> None:
    """The hard delete at the reclaim comes hours after the soft delete, which already ended billing."""
    ingest(store, registry, legacy_messages())
    state = queries.resource_state(store, CLOUD, "instance", SERVER)
    assert state is not None and state["status"] == "deleted"
    assert lifecycle(store)[-1][1] == T0 + timedelta(hours=9)


def test_error_priority_messages_change_nothing(store, registry) -> None:
    failed = versioned_sample("instance-create-error", message_id="err-1", timestamp=_oslo(T0),
                              uuid=SERVER, tenant_id=PROJECT)
    envelopes, outcomes = map_notifications([failed, *legacy_messages()[:1]], cloud=CLOUD)
    assert outcomes.by_kind("ignored") == {"error_priority": 1} and outcomes.mapped == 1
    assert all(not isinstance(e, Unmapped) for e in envelopes)


def _request(server: str, n: int) -> dict[str, Any]:
    """nova's instance.create.start: the API request, the instance still building."""
    return versioned_sample("instance-create-start", message_id=f"start-{n}", timestamp=_oslo(T0 - REQUEST),
                            uuid=server, tenant_id=PROJECT, flavor={"nova_object.data": dict(TINY)},
                            created_at=(T0 - REQUEST).strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_the_request_is_kept_in_the_history_and_billing_starts_at_the_launch(store, registry) -> None:
    messages = [_request(SERVER, 0), *versioned_messages()[:1]]  # create.start, then create.end
    outcome = ingest(store, registry, messages)
    assert outcome.stored == 2
    history = [(e["event_type"], e["verb"], e["occurred_at"]) for e in queries.history(store, CLOUD, "instance", SERVER)]
    assert history == [("compute.instance.create.start", "note", T0 - REQUEST),
                       ("compute.instance.create.end", "create", T0)]
    assert lifecycle(store) == [(T0, None, "m1.tiny", 0)]  # the 7 s of scheduling are nobody's usage


def test_a_server_deleted_while_building_is_not_billed_by_the_collector(store, registry) -> None:
    """create.start then delete.end, no create.end: a note and a delete of nothing. (Nova still stamps
    launched_at a second before terminated_at; reconciliation recovers that second from its deleted
    listing, as nova's usage bills it: tally_pipeline_tests/providers/openstack/test_clocks.py.)"""
    gone = versioned_sample("instance-delete-end", message_id="del-0", timestamp=_oslo(T0 + timedelta(seconds=2)),
                            uuid=SERVER, tenant_id=PROJECT, terminated_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            deleted_at=(T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    outcome = ingest(store, registry, [_request(SERVER, 0), gone])
    assert outcome.stored == 2
    assert lifecycle(store) == []
    assert usage(store, registry) == {}


def test_a_resize_preparation_is_stored_on_the_flavor_the_server_still_runs_on() -> None:
    """Nova's legacy ``resize.prep.end`` carries the current flavor as ``instance_type`` and the target as
    ``new_instance_type``: stored as an update on the current (older) one, which is what reconciliation
    needs when the create was lost and the resize itself says only the new flavor."""
    from tally_pipeline.providers.openstack.notifications import map_notification

    message = copy.deepcopy(sample("nova/legacy/compute.instance.finish_resize.end.json"))
    message["payload"].update(state="active", instance_type="m1.tiny", vcpus=1, memory_mb=512, root_gb=1,
                              new_instance_type="m1.small", new_instance_type_id=5)
    message.update(event_type="compute.instance.resize.prep.end", message_id="m-prep")
    stored = map_notification(message, cloud=CLOUD)
    assert isinstance(stored, dict), stored
    assert stored["event_type"] == "compute.instance.resize.prep.end"
    assert stored["payload"]["size"] == {"flavor_name": "m1.tiny", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}
    assert stored["payload"]["status"] == "active"
