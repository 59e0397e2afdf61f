"""``tally collect openstack``: the bus consumer, the buffered sender and the metrics server, run together.

Three threads besides the caller's: the consumer (``bus.BusConsumer``) writes what it reads into the
disk buffer, the sender (``Collector.start``) posts the buffer to the API, and the metrics server
answers ``/metrics`` and ``/healthz``. ``run`` returns when ``stop`` is set (SIGTERM): the consumer
stops taking messages and buffers what it has read, then the sender has until ``drain_timeout`` to
empty the buffer. What is left stays on disk and is sent by the next start; nothing is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tally_pipeline.collector.bus import BusConsumer, BusSettings
from tally_pipeline.collector.client import Collector
from tally_pipeline.collector.health import services_json
from tally_pipeline.collector.intake import read_message
from tally_pipeline.collector.metrics import CollectorMetrics, MetricsServer

log = logging.getLogger("tally_pipeline.collector")


@dataclass(frozen=True)
class CollectorService:
    """Everything one collector process needs."""

    cloud: str
    api_url: str
    token: str | None
    buffer_dir: Path
    bus: BusSettings
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8081
    drain_timeout: float = 20.0
    max_buffered_events: int = 1_000_000
    max_buffered_bytes: int = 1 << 30
    max_bus_rejections: int = 100_000
    max_rejected_bytes: int = 64 << 20
    buffer_reserve_bytes: int = 8 << 20
    http_timeout: float = 10.0
    #: reads cinder's volume type names (id → name), or None when it cannot; None: the ids are kept
    volume_type_names: Callable[[], Mapping[str, str] | None] | None = None
    volume_types_refresh: float = 3600.0


def run(service: CollectorService, stop: threading.Event) -> int:
    """Collect until ``stop`` is set; returns the process's exit status (0: stopped as asked)."""
    metrics = CollectorMetrics(exchanges=service.bus.exchanges, topics=service.bus.topics,
                               max_events=service.max_buffered_events, max_bytes=service.max_buffered_bytes)
    collector = Collector(service.api_url, service.token, service.buffer_dir,
                          max_buffered=service.max_buffered_events, max_buffered_bytes=service.max_buffered_bytes,
                          max_bus_rejections=service.max_bus_rejections,
                          max_rejected_bytes=service.max_rejected_bytes, reserve_bytes=service.buffer_reserve_bytes,
                          timeout=service.http_timeout,
                          on_result=metrics.on_send)
    metrics.watch_buffer(collector.buffer.gauges)
    names: dict[str, str] = {}  # filled in place by the refresher; the reader sees each update whole
    consumer = BusConsumer(service.bus, collector, partial(read_message, cloud=service.cloud,
                                                           volume_type_names=names), metrics)
    reading = threading.Thread(target=_guarded(consumer.run, stop), name="tally-collector-bus", daemon=True)
    try:
        server = MetricsServer(metrics, partial(_health, consumer, reading, collector), service.metrics_host,
                               service.metrics_port, live=lambda: reading.is_alive() and collector.running)
    except OSError:
        collector.close()
        raise
    log.info("collecting for cloud %s into %s, sending to %s; /metrics and /healthz on %s:%d", service.cloud,
             service.buffer_dir, collector.url, service.metrics_host, server.port)
    if service.volume_type_names is not None:
        _refresh(service.volume_type_names, names)  # before the first message: types by name from the start
        threading.Thread(target=_refreshing, args=(service.volume_type_names, names, service.volume_types_refresh,
                                                   stop), name="tally-collector-volume-types", daemon=True).start()
    server.start()
    collector.start()
    reading.start()
    try:
        stop.wait()
        log.info("stopping: no new messages; buffering what was read")
        consumer.stop()
        reading.join(30.0)
        return _drain(collector, service.drain_timeout)
    finally:
        server.close()


def _drain(collector: Collector, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    emptied = collector.wait_until_empty(timeout) if collector.running else collector.buffered() == 0
    collector.stop(max(0.0, deadline - time.monotonic()))
    if collector.running:
        # A request is in flight past the deadline: leave it (and the buffer) to the process's exit. Its
        # events are still buffered and claimed by this process, which the next start takes back.
        log.warning("the drain deadline (%.0f s) passed with a request in flight; its events stay buffered", timeout)
        return 0
    left = collector.buffered()
    collector.close()
    if emptied:
        log.info("stopped: the buffer is empty")
    else:
        log.warning("stopped with %d events buffered in %s: the next start sends them", left, collector.buffer.dir)
    return 0


def _refresh(read: Callable[[], Mapping[str, str] | None], names: dict[str, str]) -> None:
    found = read()
    if found is not None:
        names.update(found)  # a type deleted from cinder keeps its name: old volumes still carry its id
        log.info("cinder's volume types by name: %d", len(names))


def _refreshing(read: Callable[[], Mapping[str, str] | None], names: dict[str, str], every: float,
                stop: threading.Event) -> None:
    while not stop.wait(every):
        _refresh(read, names)


def _guarded(target: Any, stop: threading.Event) -> Any:
    """Run ``target``; if it dies of a bug, say so and stop the process (the supervisor restarts it)."""
    def guarded() -> None:
        try:
            target()
        except BaseException:
            log.exception("the bus consumer failed; stopping")
            stop.set()
            raise
    return guarded


def _health(consumer: BusConsumer, reading: threading.Thread, collector: Collector) -> tuple[bool, dict[str, Any]]:
    sender_error = collector.sender_error
    details: dict[str, Any] = {
        "broker_connected": consumer.connected,
        "bound_exchanges": consumer.bound_exchanges(),
        "unbound_exchanges": dict(consumer.unbound),
        "exchanges": {name: state.as_json() for name, state in consumer.exchanges.items()},
        "services": services_json(consumer.settings.service_exchanges, consumer.exchanges, time.time()),
        "last_broker_error": consumer.last_error,
        "sender": "running" if collector.running else ("stopped: " + str(sender_error) if sender_error else "stopped"),
        # A full disk: the buffer refuses new events (they stay in the broker) while it sends what it holds.
        "buffer": "writable" if (full := collector.buffer.disk_full) is None else f"not writable: {full}",
    }
    return reading.is_alive() and collector.running and full is None, details
