"""The per-type summary of a run round-trips through its stored JSON, old rows included."""

from tally_pipeline.core.type_summary import TypeSummary, summaries_from_json


def test_a_summary_reads_back_what_it_wrote() -> None:
    summary = TypeSummary(status="failed", reason="HTTP 503", code="insufficient_scope",
                          skipped={"no_project": 2}, deferred_by_reason={"unconfirmed": 1}, never_ran={"never_launched": 3})
    assert TypeSummary.from_json(summary.as_json()) == summary
    assert summary.skipped_total == 2


def test_a_row_from_an_older_run_takes_defaults_and_drops_what_it_no_longer_knows() -> None:
    stored = {"volume": {"status": "enumerated", "listed": 4, "guard_tripped": True, "retired_key": 1}}
    volume = summaries_from_json(stored)["volume"]
    assert (volume.listed, volume.guard_tripped, volume.never_ran, volume.restarts) == (4, True, {}, 0)
    assert summaries_from_json(None) == {}
