"""The bus consumer in this process against the machine's RabbitMQ (a vhost per test): its queues and
bindings, the exchanges declared as the services declare them (at once on a fresh vhost, again after
they vanish, a mismatch reported and bound as it is, a passive bind without the configure permission),
acknowledgement only after the buffer took a batch, the permissions docs/collector.md asks for. Publishers are oslo.messaging's own notifiers.

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
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.providers.openstack.notification_samples import sample
from tally_pipeline_tests.rabbit import EXCHANGE_OF, EXCHANGES, TOPICS, VHost, rabbitmqctl

NOWHERE = "http://127.0.0.1:9"  # the sender is never started here: what is buffered stays buffered


def settings(vhost: VHost, **overrides) -> BusSettings:
    broker = broker_of(overrides.pop("transport_url", vhost.transport_url()))
    values = dict(broker_urls=broker.urls, broker=broker.display, pool="tally", topics=TOPICS,
                  service_exchanges=tuple(EXCHANGE_OF.items()), batch_timeout=0.05, rebind_every=0.2)
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
        expected = {(e, queue_name("tally", t), binding_key(t)) for e in EXCHANGES for t in TOPICS}
        vhost.wait_for_bindings(expected)
        assert consumer.bound_exchanges() == sorted(EXCHANGES)
        assert {q for _, q, _ in vhost.bindings()} == {"tally.notifications", "tally.versioned_notifications"}
        assert metrics.exchange_bound.labels("octavia")._value.get() == 1


@pytest.mark.slow
def test_a_batch_is_acknowledged_only_once_the_buffer_has_it(vhost: VHost, tmp_path: Path) -> None:
    vhost.declare_exchanges()
    publishers = ServicePublishers(vhost.transport_url())
    try:
        # One batch of all eight, however slowly they arrive: the batch is full at eight, never early.
        bus = settings(vhost, batch_size=8, batch_timeout=60)
        with consuming(bus, tmp_path, max_buffered=5) as (consumer, collector, metrics):
            wait_until(lambda: len(consumer.bound_exchanges()) == len(EXCHANGES), "bindings")
            for _ in range(8):
                publishers.publish(EXCHANGE_OF["cinder"], "notifications", volume_created())
            # Eight events do not fit in five: none is buffered, none acknowledged, none lost.
            wait_until(lambda: unacked(vhost).get("tally.notifications") == (0, 8), "8 unacknowledged messages")
            wait_until(lambda: metrics.buffer_blocked._value.get() == 1, "the buffer to be reported blocked")
            assert collector.buffered() == 0
            assert metrics.received.labels("openstack", "notifications")._value.get() == 0
            collector.buffer.max_events = 100  # room again (what a sender that catches up makes)
            wait_until(lambda: collector.buffered() == 8, "the held batch to be buffered")
            wait_until(lambda: unacked(vhost).get("tally.notifications") == (0, 0), "the batch to be acknowledged")
            assert metrics.buffer_blocked._value.get() == 0
            assert metrics.received.labels("openstack", "notifications")._value.get() == 8
            assert metrics.mapped._value.get() == 8
    finally:
        publishers.close()


@pytest.mark.slow
def test_the_documented_permissions_are_enough(vhost: VHost, tmp_path: Path) -> None:
    """docs/collector.md: configure on its own queues and the exchanges it declares, write on its queues, read
    on both; no exchange exists yet (a fresh vhost)."""
    user, password = f"tally-collector-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        exchanges = r"nova|openstack|neutron|glance|octavia"
        rabbitmqctl("set_permissions", "-p", vhost.name, user, rf"^(tally\..*|{exchanges})$", r"^tally\.",
                    rf"^(tally\..*|{exchanges})$")
        publishers = ServicePublishers(vhost.transport_url())
        bus = settings(vhost, transport_url=vhost.transport_url(user, password))
        try:
            with consuming(bus, tmp_path) as (consumer, collector, _):
                wait_until(lambda: len(consumer.bound_exchanges()) == len(EXCHANGES), "bindings as the restricted user")
                publishers.publish(EXCHANGE_OF["cinder"], "notifications", volume_created())
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
            wait_until(lambda: len(consumer.unbound) == len(EXCHANGES) and consumer.connected,
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
        wait_until(lambda: len(consumer.bound_exchanges()) == len(EXCHANGES), "bindings")
    out = rabbitmqctl("list_queues", "-p", vhost.name, "name", "type", "durable")
    assert {tuple(line.split("\t")) for line in out.splitlines() if line.startswith("tally.")} == {
        ("tally.notifications", "quorum", "true"), ("tally.versioned_notifications", "quorum", "true")}


def every_binding() -> set[tuple[str, str, str]]:
    return {(e, queue_name("tally", t), binding_key(t)) for e in EXCHANGES for t in TOPICS}


@pytest.mark.slow
def test_on_a_fresh_vhost_the_exchanges_are_declared_and_bound_at_once(vhost: VHost, tmp_path: Path) -> None:
    """No service has published yet: the collector makes the exchanges as oslo.messaging would and binds at
    connection (no later retry: the retry interval is an hour), so cinder's very first message is kept."""
    assert vhost.exchanges() == {}
    publishers = ServicePublishers(vhost.transport_url())
    try:
        with consuming(settings(vhost, rebind_every=3600), tmp_path) as (consumer, collector, metrics):
            wait_until(lambda: consumer.connected, "the consumer connected")
            assert consumer.bound_exchanges() == sorted(EXCHANGES)  # bound before "connected" is said
            assert every_binding() <= vhost.bindings()
            assert vhost.exchanges() == {e: ("topic", False, False) for e in EXCHANGES}
            assert {e: s.declared for e, s in consumer.exchanges.items()} == dict.fromkeys(EXCHANGES, "declared")
            publishers.publish("openstack", "notifications", volume_created())  # cinder's stock exchange
            wait_until(lambda: collector.buffered() == 1, "cinder's first notification buffered")
            wait_until(lambda: metrics.received.labels("openstack", "notifications")._value.get() == 1, "counted")
            assert metrics.last_message.labels("openstack")._value.get() > 0
            assert consumer.exchanges["openstack"].last_message_at is not None
            assert consumer.exchanges["nova"].last_message_at is None
    finally:
        publishers.close()


@pytest.mark.slow
def test_exchanges_deleted_on_the_broker_are_declared_and_bound_again(vhost: VHost, tmp_path: Path) -> None:
    """The broker loses its transient exchanges (and with them the bindings): on reconnecting the collector
    declares and binds again before any service has published."""
    publishers = ServicePublishers(vhost.transport_url())
    try:
        with consuming(settings(vhost, rebind_every=3600), tmp_path) as (consumer, collector, metrics):
            wait_until(lambda: consumer.connected, "the consumer connected")
            vhost.delete_exchanges()
            assert vhost.exchanges() == {} and not (every_binding() & vhost.bindings())
            vhost.close_connections()
            wait_until(lambda: metrics.broker_connection_failures._value.get() >= 1, "the cut noticed")
            wait_until(lambda: consumer.connected, "the consumer reconnected")
            assert every_binding() <= vhost.bindings()
            publishers.publish("openstack", "notifications", volume_created())
            wait_until(lambda: collector.buffered() == 1, "the notification after the restart buffered")
    finally:
        publishers.close()


@pytest.mark.slow
def test_an_exchange_deleted_while_connected_comes_back_at_the_next_rebind(vhost: VHost, tmp_path: Path) -> None:
    with consuming(settings(vhost, rebind_every=0.2), tmp_path) as (consumer, _collector, metrics):
        wait_until(lambda: consumer.connected, "the consumer connected")
        vhost.delete_exchanges(("glance",))
        vhost.wait_for_bindings(every_binding())
        assert metrics.broker_connection_failures._value.get() == 0  # the same connection did it


@pytest.mark.slow
def test_an_exchange_with_other_attributes_is_reported_bound_as_it_is_and_the_service_still_publishes(
        vhost: VHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The services run with amqp_durable_queues = true, the collector was not told: each exchange is reported
    once (log, gauge), bound anyway, and left durable, so the services' notifiers keep publishing."""
    vhost.declare_exchanges(durable=True)
    publishers = ServicePublishers(vhost.transport_url(), durable=True)
    caplog.set_level("ERROR", logger="tally_pipeline.collector")
    try:
        with consuming(settings(vhost, rebind_every=3600), tmp_path) as (consumer, collector, metrics):
            wait_until(lambda: consumer.connected, "the consumer connected")
            assert consumer.bound_exchanges() == sorted(EXCHANGES)
            state = consumer.exchanges["openstack"]
            assert state.declared == "mismatch" and "PRECONDITION_FAILED" in (state.mismatch or "")
            assert "durable" in (state.mismatch or "")
            assert metrics.exchange_mismatch.labels("openstack")._value.get() == 1
            vhost.close_connections()  # a reconnection finds the same mismatch: not logged again
            wait_until(lambda: metrics.broker_connection_failures._value.get() >= 1, "the cut noticed")
            wait_until(lambda: consumer.connected, "the consumer reconnected")
            assert vhost.exchanges() == {e: ("topic", True, False) for e in EXCHANGES}  # never redeclared
            publishers.publish("openstack", "notifications", volume_created())
            wait_until(lambda: collector.buffered() == 1, "the durable exchange's notification buffered")
        mismatches = [m for r in caplog.records if "exists with other attributes" in (m := r.getMessage())]
        assert sorted(m.split("'")[1] for m in mismatches) == sorted(EXCHANGES)  # once each, not per connection
    finally:
        publishers.close()


@pytest.mark.slow
def test_told_the_services_attributes_the_collector_sees_no_mismatch(vhost: VHost, tmp_path: Path) -> None:
    vhost.declare_exchanges(durable=True)
    with consuming(settings(vhost, exchange_durable=True), tmp_path) as (consumer, _, metrics):
        wait_until(lambda: consumer.connected, "the consumer connected")
        assert {s.declared for s in consumer.exchanges.values()} == {"declared"}
        assert metrics.exchange_mismatch.labels("nova")._value.get() == 0


@pytest.mark.slow
def test_without_the_configure_permission_an_exchange_is_bound_once_its_service_declares_it(
        vhost: VHost, tmp_path: Path) -> None:
    """The 403 fallback: the declaration is refused, the bind is passive, a missing exchange is tried again."""
    user, password = f"tally-collector-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", vhost.name, user, r"^tally\.", r"^tally\.",
                    r"^(tally\..*|nova|openstack|neutron|glance|octavia)$")
        vhost.declare_exchanges(("nova",))
        publishers = ServicePublishers(vhost.transport_url())
        bus = settings(vhost, transport_url=vhost.transport_url(user, password))
        try:
            with consuming(bus, tmp_path) as (consumer, collector, metrics):
                wait_until(lambda: consumer.connected, "the consumer connected")
                assert consumer.bound_exchanges() == ["nova"]
                assert consumer.exchanges["nova"].declared == "passive"
                assert consumer.unbound["glance"] == "does not exist yet"
                assert consumer.exchanges["glance"].why_unbound == "does not exist yet"
                assert metrics.exchange_bound.labels("glance")._value.get() == 0
                assert "glance" not in vhost.exchanges()  # this user made nothing
                vhost.declare_exchanges(("glance",))  # glance publishes for the first time
                wait_until(lambda: "glance" in consumer.bound_exchanges(), "glance bound once it exists")
                publishers.publish("glance", "notifications", sample("glance/image.upload.json"))
                wait_until(lambda: collector.buffered() == 1, "glance's notification buffered")
                assert consumer.connected
        finally:
            publishers.close()
    finally:
        rabbitmqctl("delete_user", user)
