"""Prometheus text exposition for ``/metrics``: counters this process saw, gauges read from the store."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Container
from typing import Any

from tally_pipeline.api.connections import closed_connections
from tally_pipeline.ingest import BatchOutcome


def _labels(**labels: str) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


#: The ``cloud`` label of every item whose cloud is neither configured nor named by the caller's token.
OTHER_CLOUD = "other"


class ApiMetrics:
    """Counters for this API process. Thread-safe: handlers run in a thread pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events = Counter[tuple[str, str]]()  # (cloud, outcome) -> n
        self.requests_rejected = Counter[str]()  # reason -> n
        self.store_errors = 0

    def count_outcome(self, outcome: BatchOutcome, labelled: Container[str] = frozenset()) -> None:
        """Count each item under its cloud when that cloud is in ``labelled`` (the configured clouds and
        those the caller's token names), else under ``other``: the ``cloud`` of a rejected item is
        whatever the caller wrote, and one label per junk value would grow the page and this process's
        memory without bound."""
        with self._lock:
            for result in outcome.results:
                cloud = result.cloud if result.cloud and result.cloud in labelled else OTHER_CLOUD
                self.events[(cloud, result.status)] += 1

    def count_request_rejected(self, reason: str) -> None:
        with self._lock:
            self.requests_rejected[reason] += 1

    def render(self, store_gauges: list[str] | None) -> str:
        """The page: this process's counters, then ``store_gauges`` (``None``: the store did not answer,
        so they are left out and ``tally_store_up`` is 0; the counters are what an outage needs)."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        with self._lock:
            events = dict(self.events)
            rejected = dict(self.requests_rejected)
            store_errors = self.store_errors
        family("tally_events_total", "counter", "Events received by this API process, by cloud and outcome.")
        for (cloud, outcome), n in sorted(events.items()):
            lines.append(f"tally_events_total{_labels(cloud=cloud, outcome=outcome)} {n}")
        family("tally_requests_rejected_total", "counter", "Requests refused as a whole, by reason.")
        for reason, n in sorted(rejected.items()):
            lines.append(f"tally_requests_rejected_total{_labels(reason=reason)} {n}")
        family("tally_store_errors_total", "counter", "Requests answered 503 because the store was unavailable.")
        lines.append(f"tally_store_errors_total {store_errors}")
        family("tally_connections_closed_total", "counter",
               "Connections this process closed for a limit: header or body deadline, oversized headers or request line.")
        for reason, n in sorted(closed_connections().items()):
            lines.append(f"tally_connections_closed_total{_labels(reason=reason)} {n}")
        family("tally_store_up", "gauge", "1 when the gauges below were read from the store, 0 when it did not answer in time.")
        lines.append(f"tally_store_up {int(store_gauges is not None)}")
        lines.extend(store_gauges or [])
        return "\n".join(lines) + "\n"


def _ts(value: Any) -> str:
    return f"{value.timestamp():.3f}"


def store_gauges(store: Any, clouds: list[str]) -> list[str]:
    """What every API process reports alike, read from the shared store: alerts work across replicas."""
    from tally_pipeline.alerts import activity, last_runs, last_success

    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    family("tally_cloud_last_collector_event_timestamp_seconds", "gauge",
           "When the last collector event for the cloud was stored (Unix time).")
    for a in activity(store):
        if a.last_collector_event is not None:
            lines.append(f"tally_cloud_last_collector_event_timestamp_seconds{_labels(cloud=a.cloud)} {_ts(a.last_collector_event)}")
    family("tally_cloud_events_stored_total", "counter", "Events stored for the cloud, by source (all API processes).")
    for cloud, collector, reconciliation in store.query(
        "SELECT cloud, collector_events, reconciliation_events FROM cloud_activity ORDER BY cloud"
    ):
        lines.append(f"tally_cloud_events_stored_total{_labels(cloud=cloud, source='collector')} {collector}")
        lines.append(f"tally_cloud_events_stored_total{_labels(cloud=cloud, source='reconciliation')} {reconciliation}")
    family("tally_sync_configured", "gauge", "1 for every cloud in the configuration (so a never-synced cloud is visible).")
    for cloud in sorted(clouds):
        lines.append(f"tally_sync_configured{_labels(cloud=cloud)} 1")
    family("tally_sync_runs_total", "counter", "Reconciliation runs by cloud and status.")
    for cloud, status, n in store.query("SELECT cloud, status, count(*) FROM sync_runs GROUP BY cloud, status ORDER BY 1, 2"):
        lines.append(f"tally_sync_runs_total{_labels(cloud=cloud, status=status)} {n}")
    family("tally_sync_last_success_timestamp_seconds", "gauge", "Poll time of the last succeeded or partial sync.")
    for cloud, when in sorted(last_success(store).items()):
        lines.append(f"tally_sync_last_success_timestamp_seconds{_labels(cloud=cloud)} {_ts(when)}")
    runs = last_runs(store)
    family("tally_sync_last_failed", "gauge", "1 when the cloud's latest sync failed or was partial, else 0.")
    for run in runs:
        lines.append(f"tally_sync_last_failed{_labels(cloud=run.cloud)} {int(run.status in ('failed', 'partial'))}")
    family("tally_sync_last_drift_ratio", "gauge", "Corrections of the cloud's latest sync over its live resources.")
    for run in runs:
        lines.append(f"tally_sync_last_drift_ratio{_labels(cloud=run.cloud)} {run.drift or 0.0}")
    family("tally_sync_last_guard_tripped", "gauge", "1 when the latest sync held deletes behind the mass-delete guard.")
    for run in runs:
        lines.append(f"tally_sync_last_guard_tripped{_labels(cloud=run.cloud)} {int(run.guard_tripped)}")
    family("tally_sync_last_unconfirmed", "gauge",
           "Deletes by absence the cloud's latest sync deferred because the platform did not confirm them.")
    for run in runs:
        lines.append(f"tally_sync_last_unconfirmed{_labels(cloud=run.cloud)} {run.unconfirmed}")
    family("tally_sync_last_skipped", "gauge", "Listed items the cloud's latest sync skipped as unreadable.")
    for run in runs:
        lines.append(f"tally_sync_last_skipped{_labels(cloud=run.cloud)} {run.skipped}")
    lines.extend(_ledger_skips(store))
    return lines


def _ledger_skips(store: Any) -> list[str]:
    """What the posting cycles skipped or excluded, by reason (a fixed set), as the poster recorded it."""
    from tally_pipeline.store.ledger_records import skip_metrics

    every_cycle, latest = skip_metrics(store)
    lines = ["# HELP tally_ledger_skipped_total Entities skipped, or posted without intervals the meters cannot read, "
             "by reason, over every posting cycle.", "# TYPE tally_ledger_skipped_total counter"]
    lines += [f"tally_ledger_skipped_total{_labels(reason=r)} {n}" for r, n in sorted(every_cycle.items())]
    lines += ["# HELP tally_ledger_last_cycle_skipped Entities the latest posting cycle skipped or posted with "
              "exclusions, by reason.", "# TYPE tally_ledger_last_cycle_skipped gauge"]
    lines += [f"tally_ledger_last_cycle_skipped{_labels(reason=r)} {n}" for r, n in sorted(latest.items())]
    return lines
