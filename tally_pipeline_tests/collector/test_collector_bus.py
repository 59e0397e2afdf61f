"""The bus consumer in this process against the machine's RabbitMQ (a vhost per test): its queues and
bindings, acknowledgement only after the buffer took a batch, exchanges that appear late, the
permissions docs/collector.md asks for. Publishers are oslo.messaging's own notifiers.

The whole process (``tally collect openstack`` against ``tally serve``) is tested in
``test_collect_process.py``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest

from tally_pipeline.bench.oslo_bus import ServicePublishers
from tally_pipeline.collector.bus import BusConsumer, BusSettings, binding_key, queue_name
from tally_pipeline.collector.client import Collector
from tally_pipeline.collector.intake import read_message
from tally_pipeline.collector.metrics import CollectorMetrics
from tally_pipeline.collector.transport import broker_of
from tally_pipeline_tests.collector.openstack_samples import sample
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.rabbit import SERVICES, TOPICS, VHost, rabbitmqctl

NOWHERE = "http://127.0.0.1:9"  # the sender is never started here: what is buffered stays buffered


def settings(vhost: VHost, **overrides) -> BusSettings:
    broker = broker_of(overrides.pop("transport_url", vhost.transport_url()))
    values = dict(broker_urls=broker.urls, broker=broker.display, pool="tally", topics=TOPICS, exchanges=SERVICES,
                  batch_timeout=0.05, rebind_every=0.2)
    return BusSettings(**{**values, **overrides})


@contextmanager
def consuming(bus: BusSettings, buffer_dir: Path, **collector_args) -> Iterator[tuple[BusConsumer, Collector,
                                                                                        CollectorMetrics]]:
    metrics = CollectorMetrics(exchanges=bus.exchanges, topics=bus.topics, max_events=10, max_bytes=1 << 20)
    with Collector(NOWHERE, None, buffer_dir, **collector_args) as collector:
        consumer = BusConsumer(bus, collector, partial(read_message, cloud="c1"), metrics)
        thread = threading.Thread(target=consumer.run, daemon=True)
        thread.start()
        try:
            yield consumer, collector, metrics
        finally:
            consumer.stop()
            thread.join(30)
            assert not thread.is_alive()


def unacked(vhost: VHost) -> dict[str, tuple[int, int]]:
    out = rabbitmqctl("list_queues", "-p", vhost.name, "name", "messages_ready", "messages_unacknowledged")
    rows = [line.split("\t") for line in out.splitlines()]
    return {r[0]: (int(r[1]), int(r[2])) for r in rows if len(r) == 3 and r[1].isdigit()}


def volume_created() -> dict:
    return sample("cinder/volume.create.end.json")


@pytest.mark.slow
def test_one_queue_per_topic_bound_on_every_exchange_for_every_priority(vhost: VHost, tmp_path: Path) -> None:
    vhost.declare_exchanges()
    with consuming(settings(vhost), tmp_path) as (consumer, _, metrics):
        expected = {(e, queue_name("tally", t), binding_key(t)) for e in SERVICES for t in TOPICS}
        vhost.wait_for_bindings(expected)
        assert consumer.bound_exchanges() == sorted(SERVICES)
        assert {q for _, q, _ in vhost.bindings()} == {"tally.notifications", "tally.versioned_notifications"}
        assert metrics.exchange_bound.labels("octavia")._value.get() == 1


@pytest.mark.slow
def test_a_batch_is_acknowledged_only_once_the_buffer_has_it(vhost: VHost, tmp_path: Path) -> None:
    vhost.declare_exchanges()
    publishers = ServicePublishers(vhost.transport_url())
    try:
        with consuming(settings(vhost), tmp_path, max_buffered=5) as (consumer, collector, metrics):
            wait_until(lambda: len(consumer.bound_exchanges()) == len(SERVICES), "bindings")
            for _ in range(8):
                publishers.publish("cinder", "notifications", volume_created())
            # Eight events do not fit in five: none is buffered, none acknowledged, none lost.
            wait_until(lambda: unacked(vhost).get("tally.notifications") == (0, 8), "8 unacknowledged messages")
            wait_until(lambda: metrics.buffer_blocked._value.get() == 1, "the buffer to be reported blocked")
            assert collector.buffered() == 0
            assert metrics.received.labels("cinder", "notifications")._value.get() == 0
            collector.buffer.max_events = 100  # room again (what a sender that catches up makes)
            wait_until(lambda: collector.buffered() == 8, "the held batch to be buffered")
            wait_until(lambda: unacked(vhost).get("tally.notifications") == (0, 0), "the batch to be acknowledged")
            assert metrics.buffer_blocked._value.get() == 0
            assert metrics.received.labels("cinder", "notifications")._value.get() == 8
            assert metrics.mapped._value.get() == 8
    finally:
        publishers.close()


@pytest.mark.slow
def test_an_exchange_that_appears_later_is_bound_then(vhost: VHost, tmp_path: Path) -> None:
    vhost.declare_exchanges(("nova",))
    publishers = ServicePublishers(vhost.transport_url())
    try:
        with consuming(settings(vhost), tmp_path) as (consumer, collector, metrics):
            wait_until(lambda: consumer.bound_exchanges() == ["nova"], "nova bound")
            assert metrics.exchange_bound.labels("glance")._value.get() == 0
            vhost.declare_exchanges(("glance",))  # glance publishes for the first time
            wait_until(lambda: "glance" in consumer.bound_exchanges(), "glance bound once it exists")
            publishers.publish("glance", "notifications", sample("glance/image.upload.json"))
            wait_until(lambda: collector.buffered() == 1, "glance's notification buffered")
            assert consumer.connected
    finally:
        publishers.close()


@pytest.mark.slow
def test_the_documented_permissions_are_enough(vhost: VHost, tmp_path: Path) -> None:
    """docs/collector.md: configure and write on its own queues, read on them and on the service exchanges."""
    user, password = f"tally-collector-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", vhost.name, user, r"^tally\.", r"^tally\.",
                    r"^(tally\..*|nova|cinder|neutron|glance|octavia)$")
        vhost.declare_exchanges()
        publishers = ServicePublishers(vhost.transport_url())
        bus = settings(vhost, transport_url=vhost.transport_url(user, password))
        try:
            with consuming(bus, tmp_path) as (consumer, collector, _):
                wait_until(lambda: len(consumer.bound_exchanges()) == len(SERVICES), "bindings as the restricted user")
                publishers.publish("cinder", "notifications", volume_created())
                wait_until(lambda: collector.buffered() == 1, "the notification buffered")
                assert consumer.last_error is None
        finally:
            publishers.close()
    finally:
        rabbitmqctl("delete_user", user)


@pytest.mark.slow
def test_a_user_who_may_not_read_the_exchanges_binds_none_and_says_so(vhost: VHost, tmp_path: Path) -> None:
    user, password = f"tally-collector-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", vhost.name, user, r"^tally\.", r"^tally\.", r"^tally\..*$")
        vhost.declare_exchanges()
        bus = settings(vhost, transport_url=vhost.transport_url(user, password))
        with consuming(bus, tmp_path) as (consumer, _, metrics):
            # The bindings are tried before the consumer starts: "connected" comes just after them.
            wait_until(lambda: len(consumer.unbound) == len(SERVICES) and consumer.connected,
                       "the broker to refuse every binding, the consumer still connected")
            assert set(consumer.unbound.values()) == {"may not be read by this user"}
            assert consumer.bound_exchanges() == []
            assert metrics.exchange_bound.labels("nova")._value.get() == 0
    finally:
        rabbitmqctl("delete_user", user)


@pytest.mark.slow
@pytest.mark.parametrize("queue_type", ["quorum"])
def test_quorum_queues(vhost: VHost, tmp_path: Path, queue_type: str) -> None:
    vhost.declare_exchanges()
    with consuming(settings(vhost, queue_type=queue_type), tmp_path) as (consumer, _, _metrics):
        wait_until(lambda: len(consumer.bound_exchanges()) == len(SERVICES), "bindings")
    out = rabbitmqctl("list_queues", "-p", vhost.name, "name", "type", "durable")
    assert {tuple(line.split("\t")) for line in out.splitlines() if line.startswith("tally.")} == {
        ("tally.notifications", "quorum", "true"), ("tally.versioned_notifications", "quorum", "true")}
