"""One run's decisions hold for the whole run: the mass-delete guard, the first load, the poll time per type."""

from __future__ import annotations

from datetime import timedelta

from tally_pipeline.core.alerts import AlertSettings
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.services import alerts, queries
from tally_pipeline.services.reconciliation import run_sync, sync_runs
from tally_pipeline_tests.services.test_reconciliation_sync import CLOUD, NOW, OLD, collector_event, rec


def deferral_rows(store, reason: str) -> list[tuple]:
    return store.query("SELECT resource_id, action FROM sync_deferrals WHERE reason = %s ORDER BY resource_id", [reason])


def test_a_tripped_guard_holds_for_every_round_of_the_run(store, ingestor) -> None:
    # 30 live volumes, 29 gone from the listing, 40 new ones: the first round trips the guard
    # (29/30); its creates raise the live count to 70, where 29/70 would pass in a later round.
    ingestor.ingest([collector_event(f"e{i}", f"v{i}", "create", OLD) for i in range(30)], origin="t")
    listed = [rec("v0")] + [rec(f"n{i}") for i in range(40)]
    run = run_sync(store, ingestor, CLOUD, SimulatedAdapter(StaticView.of(listed), CLOUD, resource_types=("volume",)),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:guard")
    assert run.rounds >= 2, "the creates must have caused a second round"
    assert run.deleted == 0 and run.created == 40
    assert run.deferrals_by_reason() == {"mass_delete_guard": 29}
    assert len(deferral_rows(store, "mass_delete_guard")) == 29
    assert store.query("SELECT count(*) FROM events WHERE event_type = 'sync.delete'")[0][0] == 0
    assert len(queries.inventory(store, cloud=CLOUD, limit=200).resources) == 70
    volume = run.per_type["volume"]
    assert volume.guard_tripped and volume.deferred_by_reason == {"mass_delete_guard": 29}
    assert (volume.created, volume.deleted, volume.deferred) == (run.created, run.deleted, run.deferred)
    assert run.drift == round((40 + 29) / 30, 6)


def test_per_type_numbers_add_up_to_the_runs_totals(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD), collector_event("e2", "v2", "create", OLD)], origin="t")
    view = StaticView.of([rec("v1", gb=20), rec("v3"), rec("i1", rtype="instance")])
    run = run_sync(store, ingestor, CLOUD, SimulatedAdapter(view, CLOUD, resource_types=("volume", "instance")),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:sum")
    for key in ("created", "updated", "deleted", "recovered", "deferred"):
        assert getattr(run, key) == sum(getattr(t, key) for t in run.per_type.values()), key
    assert (run.created, run.updated, run.deleted) == (2, 1, 1)
    stored = sync_runs(store, cloud=CLOUD)[0]
    assert stored["per_type"]["volume"]["updated"] == 1 and stored["created"] == 2


def test_a_first_load_is_not_drift(store, ingestor) -> None:
    view = StaticView.of([rec(f"v{i}") for i in range(50)])
    run = run_sync(store, ingestor, CLOUD, SimulatedAdapter(view, CLOUD, resource_types=("volume",)),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:first")
    assert (run.first_load, run.created, run.drift) == (True, 50, 0.0)
    assert sync_runs(store, cloud=CLOUD)[0]["first_load"] is True
    condition = alerts.evaluate(store, [CLOUD], NOW, AlertSettings())["drift_high"]
    assert not condition.firing, condition.message
    # The next run of the same cloud is no first load: a real drift there counts.
    view.records_by_type["volume"] = view.records_by_type["volume"][:40]
    later = run_sync(store, ingestor, CLOUD, SimulatedAdapter(view, CLOUD, resource_types=("volume",)),
                     settle_window=300, mass_delete_guard=0.5, now=NOW + timedelta(minutes=10), run_key="tick:second")
    assert (later.first_load, later.deleted, later.drift) == (False, 10, 0.2)
    # (within the warm-up the second sync is not judged yet; past it, that drift fires)
    assert not alerts.evaluate(store, [CLOUD], NOW, AlertSettings())["drift_high"].firing
    assert alerts.evaluate(store, [CLOUD], NOW, AlertSettings(drift_warmup_syncs=1))["drift_high"].firing


def test_corrections_are_dated_when_each_type_was_listed_not_at_the_tick(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD)], origin="t")
    late = [NOW + timedelta(minutes=40), NOW + timedelta(minutes=41)]  # a queued run lists 40 minutes late
    observed = iter(late)
    view = StaticView.of([rec("i1", rtype="instance")])
    run = run_sync(store, ingestor, CLOUD, SimulatedAdapter(view, CLOUD, resource_types=("volume", "instance")),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:late", clock=lambda: next(observed))
    assert queries.resource_state(store, CLOUD, "volume", "v1")["deleted_at"] == late[0]
    assert (run.tick, run.poll_time) == (NOW, late[0])
    assert run.per_type["instance"].poll_time == late[1].isoformat()
    row = sync_runs(store, cloud=CLOUD)[0]
    assert (row["tick"], row["poll_time"], row["run_key"]) == (NOW, late[0], "tick:late")


def test_a_deletion_date_inside_the_settle_window_is_deferred(store, ingestor) -> None:
    ingestor.ingest([{**collector_event("e1", "i1", "create", OLD), "resource_type": "instance",
                      "event_type": "compute.instance.create.end",
                      "payload": {"size": {"flavor_name": "m1", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}}],
                    origin="t")
    gone = rec("i1", rtype="instance", status="DELETED", deleted_at=NOW - timedelta(seconds=60))
    run = run_sync(store, ingestor, CLOUD,
                   SimulatedAdapter(StaticView({"instance": []}, [gone]), CLOUD, resource_types=("instance",)),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:settle")
    assert run.deleted == 0 and run.deferrals_by_reason() == {"settle_window": 1}
    assert run.deferrals[0].retry_after == NOW + timedelta(seconds=240)


def test_unconfirmed_deletes_turn_sync_errors_red_and_show_in_metrics(store, ingestor) -> None:
    from tally_pipeline.api.metrics import exposition, store_families
    from tally_pipeline.providers.simulated.platform import in_down_cell

    hidden = next(f"i{n}" for n in range(200) if in_down_cell(f"i{n}"))  # a server the down cell holds
    ingestor.ingest([{**collector_event("e1", hidden, "create", OLD), "resource_type": "instance",
                      "event_type": "compute.instance.create.end",
                      "payload": {"size": {"flavor_name": "m1", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}}], origin="t")
    view = StaticView.of([rec(hidden, rtype="instance", status="ACTIVE")])
    view.failures["instance"] = "down_cell"
    run = run_sync(store, ingestor, CLOUD, SimulatedAdapter(view, CLOUD, resource_types=("instance",)),
                   settle_window=300, mass_delete_guard=0.5, now=NOW, run_key="tick:down")
    assert (run.status, run.deleted, run.unconfirmed) == ("succeeded", 0, 1)
    condition = alerts.evaluate(store, [CLOUD], NOW, AlertSettings())["sync_errors"]
    assert condition.firing and "1 deletes unconfirmed" in condition.message
    lines = exposition(store_families(store, [CLOUD])).splitlines()
    assert f'tally_sync_last_unconfirmed{{cloud="{CLOUD}"}} 1.0' in lines
    assert f'tally_sync_last_skipped{{cloud="{CLOUD}"}} 0.0' in lines
