"""The statements' rules without a database: months, when a month is closed, what a re-statement holds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from tally_pipeline.core.statements import (
    LedgerState,
    StatementLine,
    closing_waits,
    month_bounds,
    parse_month,
    previous_month,
    restate,
    statable_months,
)

NOV = date(2026, 11, 1)
END = datetime(2026, 12, 1, tzinfo=UTC)
LAG = timedelta(minutes=15)
CLOSED = LedgerState(posted_through=END, unposted_entities=0, discrepancies=0, deferrals=0, reconciled_at=None,
                     ever_reconciled=False)


def test_months_parse_strictly_and_december_ends_in_january() -> None:
    assert parse_month("2026-11") == NOV
    assert month_bounds(date(2026, 12, 1)) == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    for bad in ("2026-13", "2026-1", "26-11", "2026-11-01", ""):
        with pytest.raises(ValueError, match="YYYY-MM"):
            parse_month(bad)
    assert previous_month(datetime(2027, 1, 1, 0, 30, tzinfo=UTC)) == date(2026, 12, 1)
    assert statable_months(date(2026, 10, 1), END + LAG, LAG) == [date(2026, 10, 1), NOV]
    assert statable_months(date(2026, 10, 1), END + LAG - timedelta(microseconds=1), LAG) == [date(2026, 10, 1)]


def test_a_month_is_closed_only_once_ended_posted_verified_and_nothing_deferred() -> None:
    assert closing_waits(NOV, END + LAG, LAG, CLOSED) == []
    # still inside the ingest lag of the month's end
    assert [w.split(":")[0] for w in closing_waits(NOV, END + LAG - timedelta(seconds=1), LAG, CLOSED)] == ["month_open"]
    cases = {
        "ledger_not_posted": LedgerState(None, 0, 0, 0, None, False),
        "ledger_behind": LedgerState(END - timedelta(seconds=1), 0, 0, 0, None, False),
        "ledger_unverified": LedgerState(END, 0, 2, 0, None, False),
        "deferred": LedgerState(END, 0, 0, 1, END + LAG, True),
        "unreconciled": LedgerState(END, 0, 0, 0, END - timedelta(hours=1), True),
    }
    for code, state in cases.items():
        assert [w.split(":")[0] for w in closing_waits(NOV, END + LAG, LAG, state)] == [code], code
    assert [w.split(":")[0] for w in closing_waits(NOV, END + LAG, LAG, LedgerState(END, 3, 0, 0, None, False))] == [
        "ledger_behind"]
    # nothing posted and nothing used in the month: an empty statement, nothing to wait for
    assert closing_waits(NOV, END + LAG, LAG, LedgerState(None, 0, 0, 0, None, False, month_used=False)) == []


def line(meter: str, version: int, micro: int, previous: int | None) -> StatementLine:
    return StatementLine("c1", "p1", meter, NOV, version, micro, "hour", previous)


def test_restatement_adds_a_version_with_the_difference_and_never_rewrites() -> None:
    units = {"a": "hour", "b": "hour", "c": "hour", "d": "hour"}
    first = restate(NOV, {}, {("c1", "p1", "a"): 5, ("c1", "p1", "b"): 7}, units)
    assert first == [line("a", 1, 5, None), line("b", 1, 7, None)]
    assert [x.difference for x in first] == [5, 7]
    latest = {x.key: x for x in first} | {("c1", "p1", "d"): line("d", 2, 4, 1)}
    # a unchanged; b late usage; c new in the closed month; d's usage vanished (credited to zero)
    again = restate(NOV, latest, {("c1", "p1", "a"): 5, ("c1", "p1", "b"): 9, ("c1", "p1", "c"): 3}, units)
    assert again == [line("b", 2, 9, 7), line("c", 1, 3, None), line("d", 3, 0, 4)]
    assert [x.difference for x in again] == [2, 3, -4]
    # nothing to state for an entity without usage that was never stated
    assert restate(NOV, {}, {("c1", "p1", "a"): 0}, units) == []
