"""Nova's power and lifecycle actions, legacy and versioned, through ingest and the fold.

One instance is created, stopped, started, suspended, resumed, paused, unpaused, shelved, offloaded,
unshelved and deleted. The versioned messages are nova's official samples
(``doc/notification_samples/instance-<action>-end.json``, see the fixtures' SOURCES.md) with this
instance's id, project and flavor put in; nova publishes no legacy sample of these, so the legacy
ones are ceilometer's legacy create sample with what nova's compute manager changes: the event type
(``compute.instance.<action>.end``, nova's ``notify_about_instance_usage``) and ``state`` (the
vm_state after the action, as the versioned sample shows it).

A billing operator expects every interval to know the status nova's API showed (SHUTOFF, not the
payload's vm_state ``stopped``), each change dated at its message, and a cloud emitting both
formats folded to the same statuses.
"""

from __future__ import annotations

import copy
import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from tally_pipeline.providers.openstack.notifications import map_notification, map_notifications
from tally_pipeline.services import projection, queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline_tests.collector.test_openstack_nova_lifecycle import CLOUD, LAG, PROJECT, SERVER, T0, TINY, _oslo
from tally_pipeline_tests.providers.openstack.notification_samples import sample, versioned_sample

H = timedelta(hours=1)
# (action, message time, vm_state in the payload after it, the API status we expect)
STEPS: list[tuple[str, datetime, str, str]] = [
    ("power_off", T0 + 2 * H, "stopped", "shutoff"),
    ("power_on", T0 + 5 * H, "active", "active"),
    ("suspend", T0 + 6 * H, "suspended", "suspended"),
    ("resume", T0 + 7 * H, "active", "active"),
    ("pause", T0 + 8 * H, "paused", "paused"),
    ("unpause", T0 + 9 * H, "active", "active"),
    ("shelve", T0 + 10 * H, "shelved", "shelved"),
    ("shelve_offload", T0 + 11 * H, "shelved_offloaded", "shelved_offloaded"),
    ("unshelve", T0 + 14 * H, "active", "active"),
]


def _create_legacy() -> dict[str, Any]:
    message = copy.deepcopy(sample("nova/legacy/compute.instance.create.end.json"))
    message["payload"].update(instance_id=SERVER, tenant_id=PROJECT, state="active", instance_type=TINY["name"],
                              vcpus=TINY["vcpus"], memory_mb=TINY["memory_mb"], root_gb=TINY["root_gb"],
                              created_at=str((T0 - timedelta(seconds=7)).replace(tzinfo=None)),
                              launched_at=str(T0.replace(tzinfo=None)), deleted_at="")
    message.update(message_id="legacy-create", timestamp=_oslo(T0 + timedelta(seconds=40)))
    return message


def legacy_messages() -> list[dict[str, Any]]:
    out = [_create_legacy()]
    for n, (action, sent, state, _) in enumerate(STEPS):
        message = copy.deepcopy(out[0])
        message["payload"].update(state=state)
        message.update(event_type=f"compute.instance.{action}.end", message_id=f"legacy-{n}", timestamp=_oslo(sent))
        out.append(message)
    return out


def versioned_messages() -> list[dict[str, Any]]:
    flavor = {"nova_object.data": dict(TINY)}
    out = [versioned_sample("instance-create-end", message_id="versioned-create", timestamp=_oslo(T0 + LAG),
                            uuid=SERVER, tenant_id=PROJECT, flavor=flavor,
                            created_at=(T0 - timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            launched_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"))]
    for n, (action, sent, _, _) in enumerate(STEPS):
        # the sample's own state is nova's: only this instance's identity and flavor are put in
        out.append(versioned_sample(f"instance-{action}-end", message_id=f"versioned-{n}", timestamp=_oslo(sent + LAG),
                                    uuid=SERVER, tenant_id=PROJECT, flavor=flavor))
    return out


def statuses(store) -> list[tuple[datetime, datetime | None, str | None]]:
    rows = queries.lifecycle(store, CLOUD, "instance", SERVER) or []
    return [(r["start"], r["end"], r["platform_status"]) for r in rows]


def expected(lag: timedelta = timedelta(0)) -> list[tuple[datetime, datetime | None, str | None]]:
    bounds = [T0] + [sent + lag for _, sent, _, _ in STEPS]
    shown = ["active"] + [status for *_, status in STEPS]
    ends: list[datetime | None] = [*bounds[1:], None]
    return list(zip(bounds, ends, shown))


def ingest(store, registry, messages: list[dict[str, Any]]):
    envelopes, outcomes = map_notifications(messages, cloud=CLOUD)
    assert outcomes.as_dict()["invalid"] == {} and outcomes.mapped == len(messages), outcomes.as_dict()
    outcome = Ingestor(store, registry).ingest(envelopes, origin="test")
    projection.refresh(store)
    return outcome


@pytest.mark.parametrize(("action", "state", "status"), [(a, s, t) for a, _, s, t in STEPS])
def test_each_official_versioned_sample_maps_to_an_update_with_the_api_status(action: str, state: str,
                                                                              status: str) -> None:
    message = versioned_sample(f"instance-{action}-end", message_id="m", timestamp="2026-03-01 02:00:00.000000")
    assert message["payload"]["nova_object.data"]["state"] == state  # nova's sample, as published
    envelope = map_notification(message, cloud=CLOUD)
    assert isinstance(envelope, dict), envelope
    assert envelope["event_type"] == f"compute.instance.{action}.end"
    assert envelope["payload"]["status"] == status
    assert envelope["payload"]["size"]["vcpus"] == 1  # the flavor: an update needs the size
    assert envelope["occurred_at"] == "2026-03-01T02:00:00Z"  # dated at the message


def test_legacy_power_actions_give_every_interval_its_status(store, registry) -> None:
    outcome = ingest(store, registry, legacy_messages())
    assert (outcome.stored, outcome.rejected) == (len(STEPS) + 1, 0)
    assert statuses(store) == expected()
    state = queries.resource_state(store, CLOUD, "instance", SERVER)
    assert state is not None and state["platform_status"] == "active"


def test_versioned_power_actions_fold_to_the_same_statuses(store, registry) -> None:
    ingest(store, registry, versioned_messages())
    assert statuses(store) == expected(LAG)


@pytest.mark.parametrize("seed", [1, 2])
def test_both_formats_in_any_order_fold_to_one_status_history(store, registry, seed: int) -> None:
    both = legacy_messages() + versioned_messages()
    random.Random(seed).shuffle(both)
    ingest(store, registry, both)
    assert statuses(store) == expected()  # the later format's copy of each change is a no-op
