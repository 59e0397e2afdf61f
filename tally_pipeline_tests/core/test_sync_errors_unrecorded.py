"""sync_errors with the sync runs that failed without recording their sync (core.alerts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tally_pipeline.core.alerts import LastRun, UnrecordedFailure, sync_errors

T = datetime(2026, 12, 6, 16, 50, tzinfo=UTC)


def recorded(cloud: str, poll_time: datetime, status: str = "succeeded") -> LastRun:
    return LastRun(cloud, status, poll_time, drift=0.0, error=None)


def test_a_failure_after_the_latest_recorded_sync_fires_and_an_earlier_one_does_not() -> None:
    runs = [recorded("a", T - timedelta(minutes=10)), recorded("b", T + timedelta(minutes=10))]
    failures = [UnrecordedFailure("a", T, "run 1 failed"), UnrecordedFailure("b", T, "run 2 failed")]
    condition = sync_errors(runs, unrecorded=failures)
    assert condition.firing and condition.clouds == ("a",)
    assert condition.details == {"a": "failed: run 1 failed"}


def test_the_run_that_recorded_its_own_failure_keeps_its_own_error() -> None:
    # a scheduled run recorded its sync at its tick, which is also the failure's poll time
    condition = sync_errors([LastRun("a", "failed", T, None, "keystone refused")],
                            unrecorded=[UnrecordedFailure("a", T, "run 1 failed")])
    assert condition.details == {"a": "failed: keystone refused"}


def test_a_cloud_never_recorded_fires_on_its_failed_run_and_misconfiguration_comes_first() -> None:
    condition = sync_errors([], {"c": "no auth_url"},
                            unrecorded=[UnrecordedFailure("b", T, "run 3 failed"), UnrecordedFailure("c", T, "run 4")])
    assert condition.details == {"b": "failed: run 3 failed", "c": "misconfigured: no auth_url"}
