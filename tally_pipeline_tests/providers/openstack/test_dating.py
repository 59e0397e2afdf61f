"""Reconciliation's corrections dated by nova's instance actions (``core.reconcile.redate`` with
``ActionDating``), and the size a resource created now had before the updates its history kept
(``older_size``, with OpenStack's resize event types)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tally_pipeline.core.reconcile import Basis, Correction, KeptUpdate, older_size, redate, synthetic_events
from tally_pipeline.providers.openstack import RESIZE_EVENT_TYPES
from tally_pipeline.providers.openstack.actions import ActionEvent, InstanceAction
from tally_pipeline.providers.openstack.dating import ACTION_DATING

T = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
POLL = T + timedelta(hours=10)
SMALL = {"flavor_name": "s", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}
LARGE = {"flavor_name": "l", "vcpus": 4, "ram_mb": 4096, "disk_gb": 10}


def act(name: str, hours: float) -> InstanceAction:
    start = T + timedelta(hours=hours)
    return InstanceAction(name, f"req-{name}", start, None,
                          (ActionEvent(f"compute_{name}", start, start + timedelta(seconds=2), "Success"),))


def kept_update(at: datetime, event_type: str, size: dict[str, object]) -> KeptUpdate:
    return KeptUpdate(at, event_type, size, resizes=event_type in RESIZE_EVENT_TYPES)


def update(*, size_differs: bool, status_differs: bool) -> Correction:
    basis = Basis(T, T + timedelta(hours=6), T - timedelta(days=1), size_differs=size_differs,
                  status_differs=status_differs, prior_size=SMALL, prior_status="active", prior_project="p")
    return Correction("update", "instance", "srv", POLL, "p", LARGE, "size and status differ", status="shutoff",
                      dated_by="poll", basis=basis)


def test_a_resize_then_a_stop_are_two_changes_each_at_its_action() -> None:
    actions = {"srv": [act("resize", 2), act("confirmResize", 2.5), act("stop", 4)]}
    early, late = redate([update(size_differs=True, status_differs=True)], ACTION_DATING, actions, {}, {"instance": POLL}, POLL)
    assert (early.occurred_at, early.size, early.status, early.dated_by) == (
        T + timedelta(hours=2, seconds=2), LARGE, "active", "action")
    assert (late.occurred_at, late.size, late.status, late.step) == (T + timedelta(hours=4, seconds=2), LARGE,
                                                                     "shutoff", 1)
    first, second = synthetic_events("c", "k", [early, late])
    assert first["event_id"] != second["event_id"] and second["payload"]["sync"]["dated_by"] == "action"


def test_without_actions_offered_an_update_stays_at_the_poll() -> None:
    (same,) = redate([update(size_differs=False, status_differs=True)], ACTION_DATING, None, {}, {"instance": POLL}, POLL)
    assert (same.occurred_at, same.dated_by) == (POLL, "poll")


def test_the_size_before_the_kept_updates() -> None:
    kept = [kept_update(T + timedelta(hours=3), "volume.resize.end", {"gb": 4}),
            kept_update(T + timedelta(hours=1), "volume.transfer.accept.end", {"gb": 2})]
    assert older_size(kept, T) == ({"gb": 2}, True)  # the earliest: a transfer keeps the size it had
    assert older_size(kept[:1], T) == ({"gb": 4}, False)  # only a resize: what it was before is unknown
    assert older_size([], T) == (None, True)
    # an instance resized at 2h (per its actions): the last kept size before it that is no resize
    prep = kept_update(T + timedelta(hours=1, minutes=59), "compute.instance.resize.prep.end", SMALL)
    assert older_size([prep], T, T + timedelta(hours=2)) == (SMALL, True)
    assert older_size([prep], T, T + timedelta(hours=1)) == (None, False)
