"""Prometheus text exposition for ``/metrics``: counters this process saw, gauges read from the store."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from tally_pipeline.ingest import BatchOutcome


def _labels(**labels: str) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class ApiMetrics:
    """Counters for this API process. Thread-safe: handlers run in a thread pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events = Counter[tuple[str, str]]()  # (cloud, outcome) -> n
        self.requests_rejected = Counter[str]()  # reason -> n
        self.store_errors = 0

    def count_outcome(self, outcome: BatchOutcome) -> None:
        with self._lock:
            for result in outcome.results:
                self.events[(result.cloud or "", result.status)] += 1

    def count_request_rejected(self, reason: str) -> None:
        with self._lock:
            self.requests_rejected[reason] += 1

    def render(self, store: Any) -> str:
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
        return "\n".join(lines) + "\n"
