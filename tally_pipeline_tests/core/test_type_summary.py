"""The per-type summary of a run round-trips through its stored JSON, old rows included."""

from tally_pipeline.core.type_summary import TypeSummary, grouped_causes, summaries_from_json


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


def test_one_cause_is_said_once_whatever_request_id_each_call_carried() -> None:
    refused = "AdapterError: authentication refused: requires authentication. (HTTP 401) (Request-ID: req-{})"
    reasons = {"volume": refused.format("b2"), "instance": refused.format("a1"), "image": "HTTP 503",
               "floating_ip": None}
    assert grouped_causes(reasons) == [
        "floating_ip: None",
        "image: HTTP 503",
        "instance, volume: AdapterError: authentication refused: requires authentication. (HTTP 401) "
        "(Request-ID: req-a1, req-b2)",
    ]
