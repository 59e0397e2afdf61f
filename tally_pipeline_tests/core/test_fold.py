"""The fold rules (core/fold.py), one table row each, and the order-independence property."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally_pipeline.core.fold import FoldEvent, fold

T0 = datetime(2026, 3, 1, tzinfo=UTC)
S1 = {"gb": 10}
S2 = {"gb": 20}


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def ev(n: int, verb: str, hours: float, project: str | None = "p1", size=S1) -> FoldEvent:
    if verb in ("delete", "note"):
        size = None if size is S1 else size
    return FoldEvent(f"e{n:03d}", verb, at(hours), project, size, seq=n)


def spans(events):
    result = fold(events)
    return [(iv.start, iv.end, iv.project_id, iv.size, iv.lifecycle_no) for iv in result.intervals], result.state


@pytest.mark.parametrize(
    ("name", "events", "intervals", "status"),
    [
        ("create opens an interval", [ev(1, "create", 0)], [(at(0), None, "p1", S1, 0)], "live"),
        ("update before any create starts nothing", [ev(1, "update", 0), ev(2, "create", 2)],
         [(at(2), None, "p1", S1, 0)], "live"),
        ("only updates: unborn", [ev(1, "update", 0, size=S2)], [], "unborn"),
        ("size change opens a new interval", [ev(1, "create", 0), ev(2, "update", 1, size=S2)],
         [(at(0), at(1), "p1", S1, 0), (at(1), None, "p1", S2, 0)], "live"),
        ("project change opens a new interval", [ev(1, "create", 0), ev(2, "update", 1, project="p2")],
         [(at(0), at(1), "p1", S1, 0), (at(1), None, "p2", S1, 0)], "live"),
        ("update without project keeps the project", [ev(1, "create", 0), ev(2, "update", 1, project=None, size=S2)],
         [(at(0), at(1), "p1", S1, 0), (at(1), None, "p1", S2, 0)], "live"),
        ("update with same size and project changes nothing", [ev(1, "create", 0), ev(2, "update", 1)],
         [(at(0), None, "p1", S1, 0)], "live"),
        ("delete ends the open interval", [ev(1, "create", 0), ev(2, "delete", 3)],
         [(at(0), at(3), "p1", S1, 0)], "deleted"),
        ("a second delete changes nothing", [ev(1, "create", 0), ev(2, "delete", 3), ev(3, "delete", 5)],
         [(at(0), at(3), "p1", S1, 0)], "deleted"),
        ("the earlier of two deletes wins, whatever arrives first",
         [ev(3, "delete", 5), ev(1, "create", 0), ev(2, "delete", 3)],
         [(at(0), at(3), "p1", S1, 0)], "deleted"),
        ("update after delete changes nothing", [ev(1, "create", 0), ev(2, "delete", 1), ev(3, "update", 2, size=S2)],
         [(at(0), at(1), "p1", S1, 0)], "deleted"),
        ("create after delete starts a new lifecycle",
         [ev(1, "create", 0), ev(2, "delete", 1), ev(3, "create", 2, project="p2")],
         [(at(0), at(1), "p1", S1, 0), (at(2), None, "p2", S1, 1)], "live"),
        ("create while live acts as an update", [ev(1, "create", 0), ev(2, "create", 1, size=S2)],
         [(at(0), at(1), "p1", S1, 0), (at(1), None, "p1", S2, 0)], "live"),
        ("notes change nothing", [ev(1, "create", 0), ev(2, "note", 1, size=S2), ev(3, "note", 2)],
         [(at(0), None, "p1", S1, 0)], "live"),
        ("same instant: create before update before delete",
         [ev(3, "delete", 0), ev(2, "update", 0, size=S2), ev(1, "create", 0)], [], "deleted"),
        ("zero-length interval dropped", [ev(1, "create", 0), ev(2, "update", 0, size=S2)],
         [(at(0), None, "p1", S2, 0)], "live"),
        ("delete of an unknown resource", [ev(1, "delete", 0)], [], "unborn"),
    ],
)
def test_fold_rule(name, events, intervals, status) -> None:
    got, state = spans(events)
    assert got == intervals, name
    assert state.status == status, name


def test_state_fields() -> None:
    result = fold([ev(1, "create", 0), ev(2, "update", 1, size=S2), ev(3, "delete", 2), ev(4, "note", 3)])
    s = result.state
    assert (s.status, s.project_id, s.size) == ("deleted", "p1", S2)
    assert (s.created_at, s.deleted_at, s.last_event_at) == (at(0), at(2), at(3))
    assert (s.last_seq, s.event_count) == (4, 4)
    recreated = fold([ev(1, "create", 0), ev(2, "delete", 1), ev(3, "create", 2)]).state
    assert (recreated.status, recreated.created_at, recreated.deleted_at) == ("live", at(2), None)


def test_empty_history_is_an_error() -> None:
    with pytest.raises(ValueError):
        fold([])


SIZES = [{"gb": 1}, {"gb": 2}, {"gb": 3}]


@st.composite
def histories(draw, max_events: int = 14):
    n = draw(st.integers(min_value=1, max_value=max_events))
    events = []
    for i in range(n):
        verb = draw(st.sampled_from(["create", "create", "update", "update", "delete", "note"]))
        minute = draw(st.integers(min_value=0, max_value=30))  # collisions on purpose: same-instant ties
        project = draw(st.sampled_from(["p1", "p2", None])) if verb == "update" else "p1" if verb == "create" else None
        if verb == "create":
            project = draw(st.sampled_from(["p1", "p2"]))
        size = draw(st.sampled_from(SIZES)) if verb in ("create", "update") else None
        events.append(FoldEvent(f"e{i:02d}", verb, T0 + timedelta(minutes=minute), project, size, seq=i + 1))
    return events


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_any_permutation_and_duplication_folds_the_same(events, data) -> None:
    reference = fold(events)
    delivered = data.draw(st.permutations(events))
    duplicated = delivered + data.draw(st.lists(st.sampled_from(events), max_size=5))
    distinct = list({e.event_id: e for e in duplicated}.values())  # ingest keeps one row per event_id
    assert fold(distinct) == reference


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(histories())
def test_intervals_are_ordered_disjoint_and_nonempty(events) -> None:
    result = fold(events)
    previous_end = None
    for iv in result.intervals:
        assert iv.end is None or iv.end > iv.start
        if previous_end is not None:
            assert iv.start >= previous_end
        previous_end = iv.end if iv.end is not None else iv.start
    open_intervals = [iv for iv in result.intervals if iv.end is None]
    assert len(open_intervals) == (1 if result.state.status == "live" else 0)


def st_ev(n: int, verb: str, hours: float, status: str | None, size=S1) -> FoldEvent:
    return FoldEvent(f"e{n:03d}", verb, at(hours), "p1" if verb == "create" else None,
                     size if verb in ("create", "update") else None, seq=n, platform_status=status)


def test_a_status_change_is_an_interval_boundary_and_the_state_knows_the_status() -> None:
    """Power off at 2h, on at 5h: three intervals, each with its status; a status-less update keeps it."""
    result = fold([st_ev(1, "create", 0, "active"), st_ev(2, "update", 2, "shutoff"),
                   st_ev(3, "update", 3, None), st_ev(4, "update", 5, "active")])
    assert [(iv.start, iv.end, iv.platform_status) for iv in result.intervals] == [
        (at(0), at(2), "active"), (at(2), at(5), "shutoff"), (at(5), None, "active")]
    assert result.state.platform_status == "active"


def test_a_lifecycle_never_inherits_the_status_of_the_one_before() -> None:
    """A create without a status starts with none, even after a shutoff lifecycle or a stray update."""
    result = fold([st_ev(1, "create", 0, "shutoff"), st_ev(2, "delete", 1, None),
                   st_ev(3, "update", 2, "paused"), st_ev(4, "create", 3, None)])
    assert [(iv.lifecycle_no, iv.platform_status) for iv in result.intervals] == [(0, "shutoff"), (1, None)]
    assert result.state.platform_status is None


def test_a_create_while_live_states_the_status_even_when_it_gives_none() -> None:
    result = fold([st_ev(1, "create", 0, "shutoff"), st_ev(2, "create", 1, None), st_ev(3, "create", 2, "active")])
    assert [iv.platform_status for iv in result.intervals] == ["shutoff", None, "active"]
