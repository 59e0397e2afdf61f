"""The usage audit's rules without I/O: how a difference is split into its kinds, and the tolerance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from tally_pipeline.core.usage import Interval
from tally_pipeline.providers.openstack.usage_audit import (
    AuditError,
    AuditSettings,
    LedgerEntity,
    NovaServerUsage,
    TallyInterval,
    audit,
)
from tally_pipeline.schemas import default_registry

T1 = datetime(2026, 3, 1, tzinfo=UTC)
T2 = T1 + timedelta(days=1)
H = timedelta(hours=1)
SMALL = {"flavor_name": "s", "vcpus": 1, "ram_mb": 1024, "disk_gb": 1}
LARGE = {"flavor_name": "l", "vcpus": 4, "ram_mb": 4096, "disk_gb": 1}
METERS = {m.name: m for m in default_registry().meters() if m.name in ("instance_hours", "vcpu_hours")}


def nova(sid: str, hours: str, vcpus: int = 1, project: str = "p", started: datetime = T1) -> NovaServerUsage:
    return NovaServerUsage(sid, project, Decimal(hours), vcpus, started, None)


def tally(sid: str, start: datetime, end: datetime | None, size=SMALL, project: str = "p", status=None,
          lifecycle: int = 0) -> TallyInterval:
    return TallyInterval(sid, project, Interval(start, end, size, sid, status), lifecycle)


def run(nova_rows, tally_rows, ledger=None, deferred=None, **settings):
    clamp = {(p, m): LedgerEntity(T2 + H) for p in ("p", "q") for m in METERS}
    return audit("c", T1, T2, meters=METERS, nova=nova_rows, tally=tally_rows, ledger=ledger or clamp,
                 deferred=deferred or {}, settings=AuditSettings(**settings))


def test_agreement_lists_nothing_and_passes() -> None:
    result = run([nova("a", "24.0"), nova("b", "12.0", vcpus=4)],
                 [tally("a", T1 - H, None), tally("b", T1 + 12 * H, None, LARGE)])
    assert result.passed and result.differences == []
    assert [(p.meter, p.ledger_micro, p.nova_micro) for p in result.projects] == [
        ("instance_hours", 36_000_000, 36_000_000), ("vcpu_hours", 72_000_000, 72_000_000)]


def test_the_tolerance_is_the_larger_of_hours_and_ratio() -> None:
    rows = [tally(f"s{i}", T1, None) for i in range(10)] + [tally("extra", T1 + 23 * H, None)]
    novas = [nova(f"s{i}", "24.0") for i in range(10)]
    # one hour nova does not know of, on 240 hours: 0.42 %
    assert not run(novas, rows, tolerance_hours=Decimal("0.5"), tolerance_ratio=Decimal("0.001")).passed
    assert run(novas, rows, tolerance_hours=Decimal("0.5"), tolerance_ratio=Decimal("0.005")).passed
    assert run(novas, rows, tolerance_hours=Decimal("1"), tolerance_ratio=Decimal("0")).passed


def test_a_resize_explains_only_the_time_before_novas_start() -> None:
    # tally: small from 02:00, large from 10:00; nova: large from 10:00 (its launched_at reset)
    rows = [tally("r", T1 + 2 * H, T1 + 10 * H), tally("r", T1 + 10 * H, None, LARGE)]
    result = run([nova("r", "14.0", vcpus=4, started=T1 + 10 * H)], rows)
    assert result.passed
    assert {(d.kind, d.meter, d.amount_micro) for d in result.differences} == {
        ("resize_launched_at", "instance_hours", 8_000_000), ("resize_launched_at", "vcpu_hours", 8_000_000)}


def test_a_resize_does_not_excuse_a_server_tally_bills_too_long() -> None:
    rows = [tally("r", T1 + 2 * H, T1 + 10 * H), tally("r", T1 + 10 * H, None, LARGE)]
    # nova says the server ended at 20:00: tally's 4 large hours after it are not the resize's doing
    result = run([NovaServerUsage("r", "p", Decimal("10.0"), 4, T1 + 10 * H, T1 + 20 * H)], rows)
    kinds = {(d.kind, d.meter): d.amount_micro for d in result.differences}
    assert kinds[("resize_launched_at", "instance_hours")] == 8_000_000
    assert kinds[("server_hours", "instance_hours")] == 4_000_000
    assert kinds[("server_hours", "vcpu_hours")] == 16_000_000
    assert not result.passed


def test_usage_after_the_clamp_and_a_pending_cycle_are_explained_a_mismatch_is_not() -> None:
    ledger = {("p", "instance_hours"): LedgerEntity(T1 + 20 * H, mismatch_micro=0, pending_micro=-1_000_000),
              ("p", "vcpu_hours"): LedgerEntity(T1 + 20 * H, mismatch_micro=2_500_000)}
    result = run([nova("a", "24.0")], [tally("a", T1, None)], ledger=ledger)
    kinds = {(d.kind, d.meter): d.amount_micro for d in result.differences}
    assert kinds == {("not_posted", "instance_hours"): -4_000_000, ("not_posted", "vcpu_hours"): -4_000_000,
                     ("pending_cycle", "instance_hours"): -1_000_000, ("ledger_mismatch", "vcpu_hours"): 2_500_000}
    [failing] = result.failing
    assert (failing.meter, failing.unexplained_micro) == ("vcpu_hours", 2_500_000)
    assert failing.ledger_micro == 20_000_000 + 2_500_000


def test_a_deferral_explains_a_server_only_one_side_knows() -> None:
    result = run([nova("n", "5.0")], [], deferred={"n": "in_transition (create)"})
    assert result.passed and {d.kind for d in result.differences} == {"deferral"}
    result = run([nova("n", "5.0")], [])
    assert not result.passed and {d.kind for d in result.differences} == {"only_in_nova"}


def test_a_status_the_meter_does_not_bill_is_explained_nova_counts_it() -> None:
    meters = dict(METERS)
    from dataclasses import replace

    meters["vcpu_hours"] = replace(meters["vcpu_hours"], unbilled_statuses=frozenset({"shutoff"}))
    rows = [tally("s", T1, T1 + 6 * H, status="active"), tally("s", T1 + 6 * H, None, status="shutoff")]
    result = audit("c", T1, T2, meters=meters, nova=[nova("s", "24.0")], tally=rows,
                   ledger={("p", m): LedgerEntity(T2) for m in METERS}, deferred={}, settings=AuditSettings())
    assert result.passed
    assert [(d.kind, d.meter, d.amount_micro) for d in result.differences] == [
        ("unbilled_status", "vcpu_hours", -18_000_000)]


def test_nova_listing_a_server_twice_or_an_empty_window_is_refused() -> None:
    with pytest.raises(AuditError, match="twice"):
        run([nova("a", "1.0"), nova("a", "1.0")], [])
    with pytest.raises(AuditError, match="empty"):
        audit("c", T2, T1, meters=METERS, nova=[], tally=[], ledger={}, deferred={}, settings=AuditSettings())


def test_usage_the_latest_cycle_should_have_posted_is_not_explained() -> None:
    # the latest cycle reached 20:00, the entity's checkpoint only 12:00 (skipped since): 8 h unposted
    ledger = {("p", m): LedgerEntity(T1 + 12 * H) for m in METERS}
    result = audit("c", T1, T2, meters=METERS, nova=[nova("a", "24.0")], tally=[tally("a", T1, None)],
                   ledger=ledger, deferred={}, settings=AuditSettings(), cycle_clamp=T1 + 20 * H)
    kinds = {(d.kind, d.meter): d.amount_micro for d in result.differences}
    assert kinds[("unposted", "instance_hours")] == -8_000_000
    assert kinds[("not_posted", "instance_hours")] == -4_000_000
    assert not result.passed
    # an entity no cycle ever posted, once a cycle ran past the window: all of it unposted
    result = audit("c", T1, T2, meters=METERS, nova=[nova("a", "24.0")], tally=[tally("a", T1, None)],
                   ledger={}, deferred={}, settings=AuditSettings(), cycle_clamp=T2 + H)
    assert {(d.kind, d.amount_micro) for d in result.differences} == {("unposted", -24_000_000)}
