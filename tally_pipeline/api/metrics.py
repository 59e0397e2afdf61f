"""``/metrics`` with prometheus_client: counters this server saw, gauges read from the store.

The counters are prometheus_client ``Counter``s. With several worker processes (``tally serve
--workers N``) they run in prometheus_client's multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` names a
folder every worker writes its values to, and every scrape, whichever worker answers it, adds them up
for the whole server. The gauges read from the shared store are the same from every process; they are
built as metric families per scrape, and left out when the store does not answer in time.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Container, Iterable, Iterator
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tally_pipeline.api.connections import CONNECTIONS_CLOSED
from tally_pipeline.core.alerts import OTHER_CLOUD, fold_unknown
from tally_pipeline.services.ingest import BatchOutcome

#: The text format Prometheus scrapes.
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Each counter would also get a ``_created`` series per label set; nothing here reads them.
prometheus_client.disable_created_metrics()

# OTHER_CLOUD: the ``cloud`` label of every item whose cloud is neither known nor named by the caller's
# token, and of every stored cloud that is not known (see ``store_families``).


def multiprocess_mode() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class _Families:
    """A collector that yields metric families built beforehand (the store's, read with a deadline)."""

    def __init__(self, families: Iterable[Metric]):
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class ApiMetrics:
    """This server's counters. prometheus_client's counters are thread-safe (handlers run in a pool)."""

    def __init__(self) -> None:
        # A registry per app: tests build many apps in one process, each with its own counts.
        self.registry = CollectorRegistry(auto_describe=True)
        self.events = Counter("tally_events", "Events received by this API server, by cloud and outcome.",
                              ["cloud", "outcome"], registry=self.registry)
        self.requests_rejected = Counter("tally_requests_rejected", "Requests refused as a whole, by reason.",
                                         ["reason"], registry=self.registry)
        self.store_errors = Counter("tally_store_errors", "Requests answered 503 because the store was unavailable.",
                                    registry=self.registry)
        self.registry.register(CONNECTIONS_CLOSED)

    def count_outcome(self, outcome: BatchOutcome, labelled: Container[str] = frozenset()) -> None:
        """Count each item under its cloud when that cloud is in ``labelled`` (the configured clouds and
        those the caller's token names), else under ``other``: the ``cloud`` of a rejected item is
        whatever the caller wrote, and one label per junk value would grow the page and this process's
        memory without bound."""
        tally: dict[tuple[str, str], int] = {}
        for result in outcome.results:
            cloud = result.cloud if result.cloud and result.cloud in labelled else OTHER_CLOUD
            tally[(cloud, result.status)] = tally.get((cloud, result.status), 0) + 1
        for (cloud, status), n in tally.items():
            self.events.labels(cloud=cloud, outcome=status).inc(n)

    def count_request_rejected(self, reason: str) -> None:
        self.requests_rejected.labels(reason=reason).inc()

    def count_store_error(self) -> None:
        self.store_errors.inc()

    def render(self, store_families: list[Metric] | None) -> bytes:
        """The page: the server's counters, then ``store_families`` (``None``: the store did not answer,
        so they are left out and ``tally_store_up`` is 0; the counters are what an outage needs)."""
        page = CollectorRegistry(auto_describe=False)
        if multiprocess_mode():
            multiprocess.MultiProcessCollector(page)  # every worker's counters, added up
        else:
            page.register(_Families(self.registry.collect()))
        up = GaugeMetricFamily("tally_store_up", "1 when the store's gauges are on this page, 0 when the store did "
                               "not answer in time.", value=int(store_families is not None))
        page.register(_Families([up, *(store_families or [])]))
        return generate_latest(page)


def store_families(store: Any, clouds: list[str], known: Collection[str] | None = None) -> list[Metric]:
    """What every API process reports alike, read from the shared store: alerts work across replicas.

    ``clouds`` are the configured clouds; ``known`` the clouds named under their own name (default:
    the configured ones). Every other stored cloud is counted as ``other`` (its latest event, the sum of
    its counts): the page's size does not grow with what writers put in ``cloud``.
    """
    from tally_pipeline.services.alerts import (
        activity,
        last_runs,
        last_success,
        last_type_activity,
        latest_corrections,
        latest_dating,
    )
    from tally_pipeline.store import asset_reads, resource_reads, sync_runs

    named = frozenset(clouds) if known is None else frozenset(known)

    families: list[Metric] = []

    def gauge(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, help_text, labels=labels)
        families.append(family)
        return family

    def counter(name: str, help_text: str, labels: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, help_text, labels=labels)
        families.append(family)
        return family

    last_event = gauge("tally_cloud_last_collector_event_timestamp_seconds",
                       "When the last collector event for the cloud was stored (Unix time).", ["cloud"])
    for a in fold_unknown(activity(store), named):
        if a.last_collector_event is not None:
            last_event.add_metric([a.cloud], a.last_collector_event.timestamp())
    by_type = gauge("tally_cloud_type_last_collector_event_timestamp_seconds",
                    "When the last collector event of the resource type was stored for the cloud (Unix time).",
                    ["cloud", "resource_type"])
    latest_by_type: dict[tuple[str, str], float] = {}
    for t in last_type_activity(store):
        key = (t.cloud if t.cloud in named else OTHER_CLOUD, t.resource_type)
        latest_by_type[key] = max(latest_by_type.get(key, 0.0), t.last_collector_event.timestamp())
    for (cloud, rtype), at in sorted(latest_by_type.items()):
        by_type.add_metric([cloud, rtype], at)
    stored = counter("tally_cloud_events_stored", "Events stored for the cloud, by source (all API processes).",
                     ["cloud", "source"])
    counts: dict[str, list[int]] = {}
    for cloud, collector, reconciliation, _ in asset_reads.cloud_activity(store):
        pair = counts.setdefault(cloud if cloud in named else OTHER_CLOUD, [0, 0])
        pair[0] += collector
        pair[1] += reconciliation
    for cloud, (collector, reconciliation) in sorted(counts.items()):
        stored.add_metric([cloud, "collector"], collector)
        stored.add_metric([cloud, "reconciliation"], reconciliation)
    known_family = gauge("tally_cloud_known", "1 for every cloud named on this page under its own name (configured, "
                         "or in alerts.clouds): watched for silence however long it has been quiet.", ["cloud"])
    for cloud in sorted(named):
        known_family.add_metric([cloud], 1)
    configured = gauge("tally_sync_configured", "1 for every cloud in the configuration (so a never-synced cloud is "
                       "visible).", ["cloud"])
    for cloud in sorted(clouds):
        configured.add_metric([cloud], 1)
    runs_total = counter("tally_sync_runs", "Reconciliation runs by cloud and status.", ["cloud", "status"])
    for cloud, status, n in sync_runs.runs_by_status(store):
        runs_total.add_metric([cloud, status], n)
    success = gauge("tally_sync_last_success_timestamp_seconds", "Poll time of the last succeeded or partial sync.",
                    ["cloud"])
    for cloud, when in sorted(last_success(store).items()):
        success.add_metric([cloud], when.timestamp())
    corrections = gauge("tally_sync_last_corrections", "Resources of the type the cloud's latest succeeded or partial "
                        "sync created, deleted or recovered: lifecycle changes no stored event told of.",
                        ["cloud", "resource_type"])
    previous = gauge("tally_sync_previous_success_timestamp_seconds", "Poll time of the succeeded or partial sync "
                     "before the latest one: the latest sync's corrections happened since.", ["cloud"])
    reconciled = sync_runs.reconciled_run_counts(store)  # read once for both readers below
    for latest in latest_corrections(store, reconciled):
        for rtype, n in latest.corrections.items():
            corrections.add_metric([latest.cloud, rtype], n)
        if latest.previous_poll_time is not None:
            previous.add_metric([latest.cloud], latest.previous_poll_time.timestamp())
    dated = gauge("tally_sync_last_corrections_dated", "Status and size corrections (sync.update) of the cloud's "
                  "latest succeeded or partial sync, by what dated them: action (nova's instance actions), updated "
                  "(the platform's last change), poll (nothing better known).", ["cloud", "resource_type", "source"])
    for cloud, rtype, source, n in latest_dating(store):
        dated.add_metric([cloud, rtype, source], n)
    runs = last_runs(store, reconciled)
    for name, help_text, value in (
        ("tally_sync_last_failed", "1 when the cloud's latest sync failed or was partial (a type not listed, or "
         "deletes held by the mass-delete guard), else 0.",
         lambda r: int(r.status in ("failed", "partial"))),
        ("tally_sync_last_drift_ratio", "Corrections of the cloud's latest sync over its live resources.",
         lambda r: r.drift or 0.0),
        ("tally_sync_reconciled_runs", "How many of the cloud's syncs reconciled something (succeeded or partial): "
         "the first ones (alerts.drift_warmup_syncs) are not judged on drift.", lambda r: r.nth or 0),
        ("tally_sync_last_guard_tripped", "1 when the latest sync held deletes behind the mass-delete guard.",
         lambda r: int(r.guard_tripped)),
        ("tally_sync_last_unconfirmed",
         "Deletes by absence the cloud's latest sync deferred because the platform did not confirm them.",
         lambda r: r.unconfirmed),
        ("tally_sync_last_skipped", "Listed items the cloud's latest sync skipped as unreadable.",
         lambda r: r.skipped),
        ("tally_sync_last_insufficient_scope",
         "Resource types the cloud's latest sync did not list because its credentials cannot see every project.",
         lambda r: r.insufficient_scope),
        ("tally_sync_last_stuck_transition",
         "Resources the cloud's latest sync booked as listed after too long in transition.",
         lambda r: r.stuck_transition),
    ):
        family = gauge(name, help_text, ["cloud"])
        for run in runs:
            family.add_metric([run.cloud], value(run))
    unknown = gauge("tally_intervals_unknown_status", "Resource intervals whose platform status is unknowable "
                    "(marked unknown: billed unless a meter names it in unbilled_statuses).", ["cloud", "resource_type"])
    unknown_counts: dict[tuple[str, str], int] = {}
    for cloud, rtype, n in resource_reads.unknown_status_intervals(store):
        label = (cloud if cloud in named else OTHER_CLOUD, rtype)
        unknown_counts[label] = unknown_counts.get(label, 0) + n
    for (cloud, rtype), n in sorted(unknown_counts.items()):
        unknown.add_metric([cloud, rtype], n)
    families.extend(_ledger_skips(store))
    families.extend(_statements(store, named))
    families.extend(_usage_audits(store, clouds))
    return families


def _statements(store: Any, named: frozenset[str]) -> list[Metric]:
    """How far each cloud's monthly statements are: a month still unstated long after it ended waits for
    something (docs/ledger.md, «Monthly statements»); re-statements counted."""
    from tally_pipeline.core.statements import month_bounds, parse_month
    from tally_pipeline.store.statements import statement_metrics

    latest: dict[str, float] = {}
    restated: dict[str, int] = {}
    for cloud, month, lines in statement_metrics(store):
        label = cloud if cloud in named else OTHER_CLOUD
        latest[label] = max(latest.get(label, 0.0), month_bounds(parse_month(month))[0].timestamp())
        restated[label] = restated.get(label, 0) + lines
    last = GaugeMetricFamily("tally_statement_last_month_timestamp_seconds", "Start of the cloud's latest stated "
                             "month (Unix time): a month is stated once it is closed.", labels=["cloud"])
    again = CounterMetricFamily("tally_statement_restated_lines", "Statement lines that re-state a closed month with "
                                "late usage (version 2 and later).", labels=["cloud"])
    for cloud in sorted(latest):
        last.add_metric([cloud], latest[cloud])
        again.add_metric([cloud], restated[cloud])
    return [last, again]


def _usage_audits(store: Any, clouds: list[str]) -> list[Metric]:
    """Each configured cloud's latest usage audit against nova (``usage_audits``): one series set per
    configured cloud, the kinds of difference a fixed set."""
    from tally_pipeline.providers.openstack.usage_audit import KINDS
    from tally_pipeline.store.usage_audits import latest

    configured = set(clouds)
    audits = [a for a in latest(store) if a["cloud"] in configured]
    at = GaugeMetricFamily("tally_usage_audit_last_timestamp_seconds", "When the cloud's latest usage audit against "
                           "nova's own usage ran (Unix time).", labels=["cloud"])
    failed = GaugeMetricFamily("tally_usage_audit_last_failed", "1 when the cloud's latest usage audit failed: a "
                               "project's unexplained difference to nova exceeds the tolerance, or the audit could "
                               "not be made (tally_usage_audit_last_error).", labels=["cloud"])
    error = GaugeMetricFamily("tally_usage_audit_last_error", "1 when the cloud's latest usage audit could not be "
                              "made (nova's usage unreadable, an empty window).", labels=["cloud"])
    failing = GaugeMetricFamily("tally_usage_audit_projects_failing", "(project, meter) pairs of the latest audit "
                                "whose unexplained difference exceeds the tolerance.", labels=["cloud"])
    unexplained = GaugeMetricFamily("tally_usage_audit_unexplained", "The latest audit's unexplained difference to "
                                    "nova, summed over projects in absolute value, in the meter's unit.",
                                    labels=["cloud", "meter"])
    kinds = GaugeMetricFamily("tally_usage_audit_differences", "Differences the latest audit listed, by kind "
                              "(explained ones included).", labels=["cloud", "kind"])
    calls = GaugeMetricFamily("tally_usage_audit_api_calls", "Pages of nova's usage API the latest audit read.",
                              labels=["cloud"])
    for a in audits:
        cloud = a["cloud"]
        at.add_metric([cloud], a["recorded_at"].timestamp())
        failed.add_metric([cloud], int(a["status"] != "passed"))
        error.add_metric([cloud], int(a["status"] == "error"))
        failing.add_metric([cloud], a["projects_failing"])
        unexplained.add_metric([cloud, "instance_hours"], float(a["unexplained_instance_hours"]))
        unexplained.add_metric([cloud, "vcpu_hours"], float(a["unexplained_vcpu_hours"]))
        counts = a["differences"] or {}
        for kind in KINDS:
            kinds.add_metric([cloud, kind], int(counts.get(kind, 0)))
        calls.add_metric([cloud], a["api_calls"])
    return [at, failed, error, failing, unexplained, kinds, calls]


def _ledger_skips(store: Any) -> list[Metric]:
    """What the posting cycles skipped or excluded, by reason (a fixed set), as the poster recorded it."""
    from tally_pipeline.store.ledger_records import skip_metrics

    every_cycle, latest = skip_metrics(store)
    total = CounterMetricFamily("tally_ledger_skipped", "Entities skipped, or posted without intervals the meters "
                                "cannot read, by reason, over every posting cycle.", labels=["reason"])
    for reason, n in sorted(every_cycle.items()):
        total.add_metric([reason], n)
    last = GaugeMetricFamily("tally_ledger_last_cycle_skipped", "Entities the latest posting cycle skipped or posted "
                             "with exclusions, by reason.", labels=["reason"])
    for reason, n in sorted(latest.items()):
        last.add_metric([reason], n)
    return [total, last]


def exposition(families: list[Metric]) -> str:
    """``families`` in the text format (what a scrape shows of them)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode()
