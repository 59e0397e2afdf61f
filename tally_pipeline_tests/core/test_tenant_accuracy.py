"""Accuracy as a tenant sees it: per (cloud, project, meter), errors of different tenants never cancel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import Interval, tenant_accuracy, usage_by_entity

H = 1_000_000
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_over_billing_one_tenant_does_not_hide_under_billing_another() -> None:
    truth = {("c1", "p1", "instance_hours"): 1000 * H, ("c1", "p2", "volume_gb_hours"): 1000 * H}
    # +3.4 % on one tenant's instances, −3.5 % on another's volumes: the totals net to 0.1 %
    measured = {("c1", "p1", "instance_hours"): 1034 * H, ("c1", "p2", "volume_gb_hours"): 965 * H}
    netted = abs(sum(measured.values()) - sum(truth.values())) / sum(truth.values())
    assert netted == 0.0005
    error = tenant_accuracy(truth, measured)
    assert error.abs_error == (34 + 35) / 2000
    assert (error.worst.project_id, error.worst.meter) == ("p2", "volume_gb_hours")
    assert error.to_dict()["worst"] == {"cloud": "c1", "project_id": "p2", "meter": "volume_gb_hours",
                                        "truth": 1000.0, "measured": 965.0, "error": 0.035}


def test_usage_billed_to_a_project_that_used_nothing_is_an_error() -> None:
    error = tenant_accuracy({("c1", "p1", "instance_hours"): 10 * H},
                         {("c1", "p1", "instance_hours"): 10 * H, ("c1", "p9", "instance_hours"): 2 * H})
    assert error.abs_error == 0.2 and error.worst.project_id == "p9" and error.worst.relative == 1.0
    assert tenant_accuracy({("c1", "p1", "m"): 5}, {("c1", "p1", "m"): 5}).to_dict() == {
        "abs_error": 0.0, "worst": None, "entities": 1}


def test_usage_by_entity_counts_only_the_window_with_the_ledgers_rule() -> None:
    hours = Meter("instance_hours", "instance", "hour")
    vcpus = Meter("vcpu_hours", "instance", "vCPU-hour", per="vcpus")
    rows = [
        ("c1", "p1", "instance", Interval(T0 - timedelta(hours=2), T0 + timedelta(hours=3), {"vcpus": 2})),
        ("c1", "p2", "instance", Interval(T0 + timedelta(hours=1), None, {"vcpus": 4})),
        ("c1", "p2", "volume", Interval(T0, None, {"gb": 1})),  # no meter of these two: not counted
    ]
    got = usage_by_entity([hours, vcpus], rows, T0, T0 + timedelta(hours=4))
    assert got == {("c1", "p1", "instance_hours"): 3 * H, ("c1", "p1", "vcpu_hours"): 6 * H,
                   ("c1", "p2", "instance_hours"): 3 * H, ("c1", "p2", "vcpu_hours"): 12 * H}
