"""The bus collector's ``/metrics`` (prometheus_client) and ``/healthz``, on a port of its own.

Every label takes values from a set fixed by the configuration or the code (exchanges, topics,
reasons, outcomes), so the number of series never depends on what the bus sends. Every series of
those sets exists from the start, at zero, so a rule can tell "none yet" from "not exported".
The buffer's gauges are read from the buffer at each scrape.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import WSGIApplication

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tally_pipeline.collector.buffer import BufferGauges
from tally_pipeline.collector.client import SendResult
from tally_pipeline.collector.intake import IGNORE_CODES, REJECT_REASONS

log = logging.getLogger("tally_pipeline.collector")

#: Exchange label of a message delivered through an exchange the collector was not told about.
OTHER_EXCHANGE = "other"
SENT_OUTCOMES = ("stored", "duplicate", "rejected")
FAILED_OUTCOMES = ("unavailable", "refused", "unauthorized")


class CollectorMetrics:
    """The counters and gauges of one collector process, in a registry of their own."""

    def __init__(self, *, exchanges: Iterable[str], topics: Iterable[str], max_events: int, max_bytes: int,
                 clock: Callable[[], float] = time.time):
        self.registry = CollectorRegistry(auto_describe=True)
        self.exchanges = frozenset(exchanges)
        self._clock = clock
        r = self.registry
        self.received = Counter("tally_collector_received", "Notifications read off the bus, by exchange and topic",
                                ["exchange", "topic"], registry=r)
        self.mapped = Counter("tally_collector_mapped", "Notifications turned into an event and buffered", registry=r)
        self.ignored = Counter("tally_collector_ignored", "Notifications that change no usage, by reason",
                               ["reason"], registry=r)
        self.rejected = Counter("tally_collector_rejected",
                                "Notifications put in the collector's rejected log, by reason", ["reason"], registry=r)
        self.sent = Counter("tally_collector_sent", "Buffered events the API answered, by outcome", ["outcome"],
                            registry=r)
        self.send_failures = Counter("tally_collector_send_failures",
                                     "Requests to the API that failed (the events stay buffered), by outcome",
                                     ["outcome"], registry=r)
        self.last_send_success = Gauge("tally_collector_last_send_success_timestamp_seconds",
                                       "When the API last answered a request of this collector", registry=r)
        self.broker_connected = Gauge("tally_collector_broker_connected",
                                      "1 while the collector is connected to the broker and consuming", registry=r)
        self.broker_connection_failures = Counter("tally_collector_broker_connection_failures",
                                                  "Lost or failed connections to the broker", registry=r)
        self.exchange_bound = Gauge("tally_collector_exchange_bound",
                                    "1 when the collector's queues are bound to the exchange", ["exchange"],
                                    registry=r)
        self.exchange_mismatch = Gauge("tally_collector_exchange_mismatch",
                                       "1 when the exchange exists with other attributes (durable, auto_delete) than "
                                       "the collector declares: bound as it is", ["exchange"], registry=r)
        self.last_message = Gauge("tally_collector_last_message_timestamp_seconds",
                                  "When a notification from this exchange was last read and acknowledged",
                                  ["exchange"], registry=r)
        self.buffer_blocked = Gauge("tally_collector_buffer_blocked",
                                    "1 while the buffer refuses new events (full or failing): messages stay unacked",
                                    registry=r)
        for exchange in sorted(self.exchanges):
            self.exchange_bound.labels(exchange)
            self.exchange_mismatch.labels(exchange)
            for topic in topics:
                self.received.labels(exchange, topic)
        for code in IGNORE_CODES:
            self.ignored.labels(code)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for outcome in SENT_OUTCOMES:
            self.sent.labels(outcome)
        for outcome in FAILED_OUTCOMES:
            self.send_failures.labels(outcome)
        self._buffer_gauges = _BufferCollector(max_events, max_bytes, clock)
        r.register(self._buffer_gauges)

    def watch_buffer(self, read: Callable[[], BufferGauges]) -> None:
        """Read the buffer's gauges with ``read`` at each scrape."""
        self._buffer_gauges.read = read

    def exchange_label(self, exchange: str) -> str:
        return exchange if exchange in self.exchanges else OTHER_EXCHANGE

    def on_send(self, result: SendResult) -> None:
        """The sender's hook: one call per attempt."""
        self.sent.labels("stored").inc(result.stored)
        self.sent.labels("duplicate").inc(result.duplicates)
        self.sent.labels("rejected").inc(result.rejected + result.rejected_locally)
        if result.outcome in FAILED_OUTCOMES:
            self.send_failures.labels(result.outcome).inc()
        elif result.requests:
            self.last_send_success.set(self._clock())


class _BufferCollector(Collector):
    """The buffer's gauges, read when scraped (a failing read is reported as missing series, not a 500)."""

    def __init__(self, max_events: int, max_bytes: int, clock: Callable[[], float]):
        self.read: Callable[[], BufferGauges] | None = None
        self._limits = (max_events, max_bytes)
        self._clock = clock

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        max_events, max_bytes = self._limits
        yield GaugeMetricFamily("tally_collector_buffer_limit_events", "The buffer's limit in events", max_events)
        yield GaugeMetricFamily("tally_collector_buffer_limit_bytes", "The buffer's limit in bytes", max_bytes)
        if self.read is None:
            return
        try:
            g = self.read()
        except Exception:  # a scrape must answer even when the disk does not
            log.exception("could not read the buffer's gauges")
            return
        age = 0.0 if g.oldest_enqueued_at is None else max(0.0, self._clock() - g.oldest_enqueued_at)
        yield GaugeMetricFamily("tally_collector_buffered_events", "Events in the disk buffer, not yet answered",
                                g.buffered)
        yield GaugeMetricFamily("tally_collector_buffered_bytes", "Bytes of the events in the disk buffer",
                                g.buffered_bytes)
        yield GaugeMetricFamily("tally_collector_oldest_buffered_age_seconds",
                                "Age of the oldest buffered event (0 when the buffer is empty)", age)
        yield GaugeMetricFamily("tally_collector_rejected_log_entries", "Rows in the collector's rejected log",
                                g.rejected)
        yield GaugeMetricFamily("tally_collector_bus_rejections_dropped",
                                "Rejected bus messages dropped from the log beyond its cap", g.bus_rejections_dropped)
        yield GaugeMetricFamily("tally_collector_rejected_log_bytes",
                                "Bytes of the rejected log (bodies and messages), bounded by max_rejected_bytes",
                                g.rejected_bytes)
        yield GaugeMetricFamily("tally_collector_rejected_log_dropped",
                                "Rejected-log rows dropped, oldest first, to keep it within max_rejected_bytes",
                                g.rejected_dropped)
        yield GaugeMetricFamily("tally_collector_buffer_disk_full",
                                "1 while the buffer's disk is full: new events are refused, held ones still sent",
                                1 if g.disk_full else 0)
        if g.disk_free_bytes is not None:
            yield GaugeMetricFamily("tally_collector_buffer_disk_free_bytes",
                                    "Free bytes on the file system holding the buffer", g.disk_free_bytes)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a scrape every few seconds is not news
        pass


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/livez`` served from a thread; ``health()`` says whether the process
    works, ``live()`` only whether its threads run (a full disk fails ``/healthz``, not ``/livez``: a
    restart would not give the disk back, and would interrupt the drain)."""

    def __init__(self, metrics: CollectorMetrics, health: Callable[[], tuple[bool, dict[str, Any]]],
                 host: str, port: int, live: Callable[[], bool] | None = None):
        # make_wsgi_app is annotated as returning a bare Callable; what it returns is a WSGI application.
        self._metrics_app: WSGIApplication = make_wsgi_app(metrics.registry)
        self._health = health
        self._live = live or (lambda: health()[0])
        self._server = make_server(host, port, self._app, server_class=_ThreadingServer, handler_class=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="tally-collector-metrics",
                                        daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path == "/healthz":
            ok, details = self._health()
            body = json.dumps({"status": "ok" if ok else "failing", **details}).encode()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if path == "/livez":
            ok = self._live()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"live\n" if ok else b"not live: a thread of the collector stopped\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: /metrics, /healthz and /livez live here\n"]
