"""Drift is measured over what the previous sync could have seen (issue #37): a landing backlog that
arrives after a sync, with its own losses from before that sync, is settled without firing
drift_high; a loss since the sync still fires it. On both stores, with real runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tally_pipeline.core import alerts as rules
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.services import alerts
from tally_pipeline_tests.services.test_reconciliation_sync import CLOUD, collector_event, rec, sync

NO_WARMUP = rules.AlertSettings(drift_warmup_syncs=0)  # judge every sync: the test is about what drift counts


def drift_high(store) -> rules.Condition:
    return alerts.evaluate(store, [CLOUD], datetime.now(UTC), NO_WARMUP)["drift_high"]


def test_a_backlog_after_a_sync_is_settled_not_drift_and_a_loss_since_is(store, ingestor) -> None:
    start = datetime.now(UTC) - timedelta(hours=2)
    live = [rec(f"v{i}", created=start) for i in range(20)]
    # The collector delivered the first ten creates in time; the sync books the other ten from the listing.
    ingestor.ingest([collector_event(f"c{i}", f"v{i}", "create", start) for i in range(10)], origin="t")
    first = sync(store, ingestor, StaticView.of(live), now=datetime.now(UTC), run_key="tick:1")
    assert first.created == 10
    # After the sync, a landing backlog of the hour before it: the ten creates again (duplicates in
    # meaning of the sync's corrections), and five volumes created and deleted before the sync whose
    # deletes the collector lost (5 % of a larger history, say). Nothing happened after the sync.
    backlog = [collector_event(f"c{i}", f"v{i}", "create", start) for i in range(10, 20)]
    backlog += [collector_event(f"g{i}", f"gone{i}", "create", start) for i in range(5)]
    ingestor.ingest(backlog, origin="file:backlog")
    second = sync(store, ingestor, StaticView.of(live), now=datetime.now(UTC), run_key="tick:2")
    # The second sync deletes the five (their deletes were lost): corrections, all of them late.
    assert (second.deleted, second.late, second.drift) == (5, 5, 0.0)
    assert second.per_type["volume"].late == 5 and second.per_type["volume"].corrections == 5
    assert not drift_high(store).firing
    # A real loss after the second sync: four volumes deleted on the platform, their deletes never
    # delivered, and one created with its create lost. The next sync corrects them: drift, red.
    now_live = live[4:] + [rec("v-new", created=datetime.now(UTC) - timedelta(minutes=30))]
    third = sync(store, ingestor, StaticView.of(now_live), now=datetime.now(UTC), run_key="tick:3")
    assert (third.deleted, third.created, third.late) == (4, 1, 0)
    assert third.drift == round(5 / 20, 6)
    condition = drift_high(store)
    assert condition.firing and condition.clouds == (CLOUD,)
