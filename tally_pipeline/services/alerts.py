"""Reading what the alert conditions need from the store, and evaluating them (``core/alert_defs.py``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from tally_pipeline.core import alert_defs as defs
from tally_pipeline.core import alerts as rules
from tally_pipeline.core.platform import INSUFFICIENT_SCOPE
from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.core.type_summary import summaries_from_json
from tally_pipeline.providers.openstack import SERVICE_OF_TYPE, SILENT_SERVICE_HINT
from tally_pipeline.store import asset_reads, ledger_records, sync_runs, type_activity
from tally_pipeline.store.base import Store


def activity(store: Store) -> list[rules.CloudActivity]:
    rows = asset_reads.last_collector_events(store)
    return [rules.CloudActivity(c, to_utc(t) if t else None) for c, t in rows]


def last_runs(store: Store, counts: Mapping[str, int]) -> list[rules.LastRun]:
    """Each cloud's latest finished sync run; ``counts``: ``sync_runs.reconciled_run_counts``."""
    rows = sync_runs.latest_finished_runs(store)
    out = []
    for cloud, status, poll, drift, error, per_type, stuck in rows:
        types = summaries_from_json(orjson.loads(per_type) if isinstance(per_type, str) else per_type).values()
        tripped = any(t.guard_tripped for t in types)
        unconfirmed = sum(t.deferred_by_reason.get("unconfirmed", 0) for t in types)
        skipped = sum(t.skipped_total for t in types)
        narrow = sum(1 for t in types if t.code == INSUFFICIENT_SCOPE)
        out.append(rules.LastRun(cloud, status, to_utc(poll), drift, error, tripped, unconfirmed, skipped, narrow,
                                 int(stuck or 0), counts.get(cloud, 0)))
    return out


def last_type_activity(store: Store) -> list[rules.TypeActivity]:
    """When the collector last stored an event of each (cloud, resource type)."""
    return [rules.TypeActivity(c, t, to_utc(at)) for c, t, at in type_activity.last_collector_events(store)]


def latest_corrections(store: Store, counts: Mapping[str, int]) -> list[rules.LatestCorrections]:
    """Each cloud's latest reconciled sync: its corrections per type, and the poll time of the one before;
    ``counts``: ``sync_runs.reconciled_run_counts``."""
    previous: dict[str, datetime] = {}
    latest: list[tuple[str, datetime, Any]] = []
    for cloud, poll, per_type, rank in sync_runs.latest_reconciled_runs(store):
        if rank == 1:
            latest.append((cloud, to_utc(poll), per_type))
        else:
            previous[cloud] = to_utc(poll)
    out = []
    for cloud, poll, per_type in latest:
        types = summaries_from_json(orjson.loads(per_type) if isinstance(per_type, str) else per_type)
        out.append(rules.LatestCorrections(cloud, counts.get(cloud, 0), poll, previous.get(cloud),
                                           {t: s.lifecycle_corrections for t, s in sorted(types.items())}))
    return out


def latest_dating(store: Store) -> list[tuple[str, str, str, int]]:
    """Each cloud's latest reconciled sync: per type, what dated its status and size corrections
    (``action``, ``updated``, ``poll``: every source, zero included), as (cloud, type, source, count)."""
    from tally_pipeline.core.platform import DATED_BY

    out: list[tuple[str, str, str, int]] = []
    for cloud, _, per_type, rank in sync_runs.latest_reconciled_runs(store):
        if rank != 1:
            continue
        types = summaries_from_json(orjson.loads(per_type) if isinstance(per_type, str) else per_type)
        for rtype, summary in sorted(types.items()):
            if summary.updated or summary.dated_by:
                out.extend((cloud, rtype, source, summary.dated_by.get(source, 0)) for source in DATED_BY)
    return out


def last_success(store: Store) -> dict[str, datetime]:
    rows = sync_runs.last_success_polls(store)
    return {c: to_utc(t) for c, t in rows}


def ledger_skips(store: Store) -> list[rules.LedgerSkip]:
    """What the latest posting cycle skipped or excluded."""
    rows = store.run(ledger_records.latest_skips)
    return [rules.LedgerSkip(r.cloud, r.project_id, r.meter, r.reason, r.excluded_intervals) for r in rows]


def evaluate(store: Store, clouds: list[str], now: datetime, settings: rules.AlertSettings,
             misconfigured: Mapping[str, str] | None = None, watched: Collection[str] = (),
             unrecorded: Iterable[rules.UnrecordedFailure] = ()) -> dict[str, rules.Condition]:
    """Every checked alert's state (``core.alert_defs.CHECKED``), by key; ``clouds`` are the configured
    clouds, ``misconfigured`` (cloud -> reason) fires sync_errors for those clouds, ``watched`` the other
    clouds named in ``alerts.clouds`` (known too: watched for silence and named on ``/metrics``),
    ``unrecorded`` the sync runs that failed without recording their sync (the orchestrator knows them;
    the store could not be written)."""
    return defs.evaluate(inputs(store, clouds, now, misconfigured, watched, unrecorded), settings)


def inputs(store: Store, clouds: list[str], now: datetime, misconfigured: Mapping[str, str] | None = None,
           watched: Collection[str] = (), unrecorded: Iterable[rules.UnrecordedFailure] = ()) -> defs.AlertInputs:
    """What every alert condition reads, read from the store once."""
    counts = sync_runs.reconciled_run_counts(store)
    return defs.AlertInputs(
        now=now, clouds=tuple(clouds), known=frozenset(clouds) | frozenset(watched), activity=tuple(activity(store)),
        last_success=last_success(store), last_runs=tuple(last_runs(store, counts)),
        misconfigured=dict(misconfigured or {}), unrecorded=tuple(unrecorded), ledger_skips=tuple(ledger_skips(store)),
        latest_corrections=tuple(latest_corrections(store, counts)), type_activity=tuple(last_type_activity(store)),
        services=SERVICE_OF_TYPE, service_hint=SILENT_SERVICE_HINT)
