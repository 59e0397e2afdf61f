"""Which of nova's instance actions explains a difference, and which instant dates it (``providers/openstack/actions.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.providers.openstack.actions import (
    ActionEvent,
    InstanceAction,
    date_flavor,
    date_status,
    history,
    launch,
)

T = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
POLL = T + timedelta(hours=10)
SMALL = {"flavor_name": "s", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}
LARGE = {"flavor_name": "l", "vcpus": 4, "ram_mb": 4096, "disk_gb": 10}


def act(name: str, hours: float, *, took: float = 3.0, failed: bool = False, events: bool = True) -> InstanceAction:
    start = T + timedelta(hours=hours)
    shown = (ActionEvent(f"compute_{name}", start, start + timedelta(seconds=took), "Error" if failed else "Success"),)
    return InstanceAction(name, f"req-{name}-{hours}", start, "Error" if failed else None, shown if events else ())


def at(hours: float, took: float = 3.0) -> datetime:
    return T + timedelta(hours=hours, seconds=took)


def test_the_last_action_that_explains_a_status_dates_it_at_its_last_events_finish() -> None:
    actions = [act("stop", 1), act("start", 2), act("stop", 3)]
    dated = date_status(actions, "shutoff", observed=T, updated=at(5), poll=POLL)
    assert (dated.at, dated.by, dated.action) == (at(3), "action", "stop")


@pytest.mark.parametrize("shown, actions, expected_by", [
    # the last status action leaves the server active: it does not explain shutoff (nova's power sync did)
    ("shutoff", [act("stop", 1), act("start", 2)], "updated"),
    # a failed action explains nothing
    ("shutoff", [act("stop", 3, failed=True)], "updated"),
    # done before the last observation: its effect would have been seen
    ("shutoff", [act("stop", 0.5)], "updated"),
    # a shelve offloads at once (shelved_offload_time 0) or not
    ("shelved_offloaded", [act("shelve", 4)], "action"),
    ("shelved", [act("shelve", 4)], "action"),
    ("error", [act("stop", 4)], "updated"),
])
def test_what_explains_a_status(shown: str, actions: list[InstanceAction], expected_by: str) -> None:
    assert date_status(actions, shown, observed=T + timedelta(hours=1), updated=at(6), poll=POLL).by == expected_by


def test_updated_only_when_later_than_the_last_observation_else_the_poll() -> None:
    assert date_status([], "shutoff", observed=at(7), updated=at(6), poll=POLL).at == POLL
    assert date_status([], "shutoff", observed=at(5), updated=at(6), poll=POLL).at == at(6)
    assert date_status([], "shutoff", observed=at(5), updated=None, poll=POLL).by == "poll"
    # an updated after the poll (a clock ahead) is not believed
    assert date_status([], "shutoff", observed=at(5), updated=POLL + timedelta(seconds=1), poll=POLL).by == "poll"


def test_a_flavor_is_dated_by_its_resize_or_revert_else_by_a_confirm() -> None:
    assert date_flavor([act("resize", 2), act("confirmResize", 2.1)], observed=T, updated=None, poll=POLL).at == at(2)
    assert date_flavor([act("resize", 2), act("revertResize", 3)], observed=T, updated=None, poll=POLL).at == at(3)
    assert date_flavor([act("confirmResize", 2.1)], observed=T, updated=None, poll=POLL).action == "confirmResize"
    assert date_flavor([act("stop", 2)], observed=T, updated=at(4), poll=POLL).by == "updated"


def test_an_action_without_events_is_dated_at_its_request() -> None:
    assert date_status([act("stop", 2, events=False)], "shutoff", observed=T, updated=None, poll=POLL).at == \
        T + timedelta(hours=2)


def test_the_launch_is_the_create_actions_end_when_a_resize_reset_launched_at() -> None:
    create = act("create", 0, took=40)
    assert launch([create], at(0, 38)) == at(0, 38)  # untouched: nova's launched_at
    assert launch([create, act("resize", 3)], at(3)) == at(0, 40)


def test_a_past_from_the_actions_ends_as_listed() -> None:
    actions = [act("create", 0, took=40), act("resize", 1), act("confirmResize", 1.5), act("stop", 2)]
    past = history(actions, launched_at=at(1), shown="shutoff", size=LARGE, size_before=SMALL, updated=at(2),
                   poll=POLL)
    assert (past.start, past.status, past.size, past.size_unknown) == (at(0, 40), "active", SMALL, False)
    assert [(s.at, s.status, s.size["flavor_name"], s.dated.by) for s in past.steps] == [
        (at(1), "verify_resize", "l", "action"), (at(1.5), "active", "l", "action"), (at(2), "shutoff", "l", "action")]
    # without a kept older flavor: the listed one from the start, marked
    blind = history(actions, launched_at=at(1), shown="shutoff", size=LARGE, size_before=None, updated=None, poll=POLL)
    assert blind.size == LARGE and blind.size_unknown


def test_a_status_no_action_reaches_is_reached_at_updated_or_the_poll() -> None:
    past = history([act("create", 0)], launched_at=at(0), shown="error", size=SMALL, size_before=None,
                   updated=at(4), poll=POLL)
    assert [(s.at, s.status, s.dated.by) for s in past.steps] == [(at(4), "error", "updated")]
    untouched = history([act("create", 0)], launched_at=at(0), shown="active", size=SMALL, size_before=None,
                        updated=at(0), poll=POLL)
    assert untouched.steps == ()


def test_a_stop_in_the_launchs_second_is_after_the_launch_and_the_create_is_no_step() -> None:
    """Nova's times are whole seconds: a stop recorded in the launch's second, and a create whose build event
    nova finished a second after that stop, still give a past that ends stopped by the stop action."""
    launched = T + timedelta(hours=1)
    stop = InstanceAction("stop", "req-stop", launched, None,
                          (ActionEvent("compute_stop_instance", launched, launched, "Success"),))
    create = InstanceAction("create", "req-create", T, None, (
        ActionEvent("compute__do_build_and_run_instance", T, launched + timedelta(seconds=1), "Success"),))
    past = history([create, stop], launched_at=launched, shown="shutoff", size=SMALL, size_before=None,
                   updated=launched, poll=POLL)
    assert past.start == launched and past.status == "active"
    assert [(s.at, s.status, s.dated.by, s.dated.action) for s in past.steps] == [
        (launched, "shutoff", "action", "stop")]
