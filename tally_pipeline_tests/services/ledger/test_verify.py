"""Verification finds every way postings can disagree with usage, and only those."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline_tests.ledger_data import DAY, HOUR, T0, Row, insert, replace_row, vm

pytestmark = pytest.mark.slow  # a real process or a long property search per test


def setup_ledger(store, registry) -> list[Row]:
    rows = [Row("p1", "vm-1", T0 - DAY, None, vm(vcpus=2)), Row("p2", "vm-2", T0 - DAY, None, vm(vcpus=1))]
    insert(store, *rows)
    post_usage(store, registry, now=T0, ingest_lag=900, window_days=35)
    return rows


def kinds(report) -> list[tuple[str, str, str]]:
    return [(d.project_id, d.meter, d.kind) for d in report.discrepancies]


def test_a_fresh_ledger_verifies(store, registry) -> None:
    setup_ledger(store, registry)
    report = verify(store, registry)
    assert report.ok and report.entities == 6 and report.to_dict()["discrepancies"] == []


def test_a_tampered_posting_is_a_ledger_mismatch(store, registry) -> None:
    setup_ledger(store, registry)
    store.run(lambda uow: uow.execute("UPDATE ledger_postings SET amount = amount + 1 WHERE project_id = 'p2' AND meter = 'vcpu_hours'"))
    report = verify(store, registry)
    assert kinds(report) == [("p2", "vcpu_hours", "ledger_mismatch")]
    d = report.discrepancies[0]
    assert (str(d.posted), str(d.checkpoint_total), str(d.recomputed)) == ("24.750000", "23.750000", "23.750000")
    assert kinds(verify(store, registry, include_history=False)) == kinds(report)


def test_postings_without_a_checkpoint_are_orphans(store, registry) -> None:
    setup_ledger(store, registry)
    store.run(lambda uow: uow.execute("DELETE FROM usage_checkpoints WHERE project_id = 'p1' AND meter = 'instance_hours'"))
    assert kinds(verify(store, registry)) == [("p1", "instance_hours", "orphan_postings"),
                                              ("p1", "instance_hours", "never_posted")]
    assert kinds(verify(store, registry, include_history=False)) == [("p1", "instance_hours", "orphan_postings")]


def test_history_changed_after_the_cycle_is_reported_until_the_next_cycle(store, registry) -> None:
    rows = setup_ledger(store, registry)
    replace_row(store, rows[0], end=T0 - 2 * HOUR)
    report = verify(store, registry)
    assert kinds(report) == [("p1", m, "history_changed") for m in ("instance_hours", "ram_gb_hours", "vcpu_hours")]
    assert str(report.discrepancies[0].recomputed) == "22.000000"
    assert verify(store, registry, include_history=False).ok  # the ledger itself is consistent
    post_usage(store, registry, now=T0 + timedelta(hours=1), ingest_lag=900, window_days=35)
    assert verify(store, registry).ok


def test_an_unreadable_size_in_posted_history_is_reported(store, registry) -> None:
    rows = setup_ledger(store, registry)
    replace_row(store, rows[1], size=vm(vcpus="one"))
    report = verify(store, registry)
    assert kinds(report) == [("p2", "vcpu_hours", "unreadable_usage")]
    assert "vcpus" in report.discrepancies[0].detail and report.discrepancies[0].recomputed is None
