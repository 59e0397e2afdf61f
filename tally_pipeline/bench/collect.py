"""``tally bench collect``: notifications per second through the whole fast path, against merely reading them.

One run, one broker, the same messages three times over. Before anything is published the run's
queues are bound: the collector's (``<pool>.<topic>``), a baseline queue, and an oslo.messaging
listener's pool. Then oslo.messaging's ``Notifier`` publishes N notifications as the five services
do (their exchanges, a topic of the run's own so nothing else receives them). Each queue then holds
every message, and is drained in turn:

1. **baseline**: a consumer that only reads and acknowledges, with the collector's own means (py-amqp's
   consumer callback under kombu, its prefetch, one ``multiple`` ack per 500): the floor of reading
   these messages from this broker;
2. **oslo.messaging listener**: its notification listener in a pool, doing nothing with them: what
   the collector would cost built on it (the reason it is built on kombu);
3. **end to end**: ``tally collect openstack`` (its own process; with ``collectors``, that many on the
   same queues and buffer directory) maps, buffers (fsync) and acknowledges them, and its sender posts
   them to ``tally serve`` (its own process) on Postgres, until every event the mix maps to is stored.
   The collector's resident memory is sampled all along.

The queues are deleted at the end, whatever happens.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import kombu

from tally_pipeline.bench.collector_process import CollectorProcess, CollectorProcessError
from tally_pipeline.bench.common import BenchOptionError
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.collector.bus import binding_key, queue_name
from tally_pipeline.collector.intake import Mapped, read_message
from tally_pipeline.collector.transport import broker_of
from tally_pipeline.config import DEFAULT_SERVICE_EXCHANGES
from tally_pipeline.store import open_store

#: Where each service publishes in a stock deployment (cinder on oslo.messaging's default ``openstack``).
EXCHANGE_OF = dict(DEFAULT_SERVICE_EXCHANGES)
EXCHANGES = tuple(dict.fromkeys(EXCHANGE_OF.values()))
RSS_GROWTH_ALLOWED = 0.10
RSS_GROWTH_FLOOR_MB = 16.0
PREFETCH = 1000
ACK_EVERY = 500
PUBLISHERS = 4


def run(*, database: str, transport_url: str, messages: int, seed: int = 1, batch_size: int = 500,
        prefetch: int = PREFETCH, collectors: int = 1, oslo: bool = True,
        progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:10]
    topic, pool, cloud = f"tally-bench-{run_id}", f"tally-bench-{run_id}", f"bench-{run_id}"
    broker = broker_of(transport_url)
    mix = list(_mix(messages, seed))
    mapped = sum(1 for _, _, m in mix if isinstance(read_message(_wire(m), cloud=cloud), Mapped))
    report: dict[str, Any] = {
        "messages": messages, "mapped": mapped, "mix": dict(Counter(m["event_type"] for _, _, m in mix)),
        "broker": broker.display, "load_average_start": os.getloadavg(),
    }
    baseline_queue = f"{pool}-baseline"
    with _queues(broker.urls[0], topic, [queue_name(pool, topic), baseline_queue, f"{topic}.info"]) as amqp:
        listener = _oslo_listener(transport_url, f"{pool}-oslo", topic) if oslo else None
        try:
            report["publish"] = _publish(transport_url, topic, mix, progress)
            report["baseline_kombu_consume_ack"] = _consume_and_ack(amqp, baseline_queue, messages, prefetch)
            if listener is not None:
                report["oslo_listener_consume_ack"] = _drain_listener(listener, messages)
            report["end_to_end"] = _end_to_end(database, transport_url, pool, topic, cloud, messages, mapped,
                                               batch_size, prefetch, collectors, progress)
        finally:
            if listener is not None:
                listener.close()
            _delete(amqp, [f"{pool}-oslo"])
    e2e, base = report["end_to_end"], report["baseline_kombu_consume_ack"]
    e2e["ratio_to_baseline"] = round(e2e["notifications_per_second"] / base["per_second"], 3)
    if "oslo_listener_consume_ack" in report:
        e2e["ratio_to_oslo_listener"] = round(
            e2e["notifications_per_second"] / report["oslo_listener_consume_ack"]["per_second"], 3)
    report["goals"] = {
        "ratio_to_baseline_at_least_0.5": e2e["ratio_to_baseline"] >= 0.5,
        "at_least_2000_per_second": e2e["notifications_per_second"] >= 2000,
        "rss_flat": e2e["collector"]["rss_flat"],
    }
    report["load_average_end"] = os.getloadavg()
    return report


# -- the bus ---------------------------------------------------------------------------------------


@contextmanager
def _queues(amqp_url: str, topic: str, queues: list[str]) -> Iterator[str]:
    """The run's queues, bound on every service exchange for ``topic`` before anything is published; deleted
    after. The exchanges are made as oslo.messaging makes them when they do not exist yet."""
    with kombu.Connection(amqp_url) as conn:
        channel = conn.channel()
        for exchange in EXCHANGES:
            channel.exchange_declare(exchange, "topic", durable=False, auto_delete=False)
        for name in queues[:-1]:
            channel.queue_declare(queue=name, durable=True, auto_delete=False)
            for exchange in EXCHANGES:
                channel.queue_bind(queue=name, exchange=exchange, routing_key=binding_key(topic))
    try:
        yield amqp_url
    finally:
        _delete(amqp_url, queues)  # the last: the notifier's own default queue for the topic


def _delete(amqp_url: str, queues: list[str]) -> None:
    with kombu.Connection(amqp_url) as conn:
        for name in queues:
            channel = conn.channel()
            try:
                channel.queue_delete(queue=name)
            except Exception:  # not there: nothing to clean
                pass
            finally:
                try:
                    channel.close()
                except Exception:
                    pass


def _oslo_listener(transport_url: str, pool: str, topic: str) -> Any:
    """oslo.messaging's listener in ``pool``, started once to make its queue and bindings, then stopped.

    ``start`` declares and binds before it returns (the rabbit driver declares its consumers in the
    caller's thread); the listener's count at the end proves no message missed its queue."""
    from tally_pipeline.bench.oslo_bus import PoolListener

    listener = PoolListener(transport_url, pool, EXCHANGES, [topic], keep=False).start()
    listener.stop()
    return listener


def _publish(transport_url: str, topic: str, mix: list[tuple[str, str, dict[str, Any]]],
             progress: Callable[[str, int], None] | None) -> dict[str, Any]:
    from tally_pipeline.bench.oslo_bus import ServicePublishers

    def publish(part: list[tuple[str, str, dict[str, Any]]]) -> None:
        publishers = ServicePublishers(transport_url)
        try:
            for n, (exchange, _, message) in enumerate(part, 1):
                publishers.publish(exchange, topic, message)
                if progress is not None and n % 1000 == 0:
                    progress("publish", 1000)
        finally:
            publishers.close()

    # Each publish waits for the broker's confirm: a few publishers at once keep it busy.
    parts = [mix[i::PUBLISHERS] for i in range(PUBLISHERS)]
    started = time.perf_counter()
    threads = [threading.Thread(target=publish, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "per_second": round(len(mix) / seconds), "publishers": PUBLISHERS}


def _consume_and_ack(amqp_url: str, queue: str, count: int, prefetch: int) -> dict[str, Any]:
    """Read ``count`` messages and acknowledge them (every ``ACK_EVERY``, at once), nothing else: the same
    py-amqp consumer callback, prefetch and acks as the collector's."""
    got = [0]
    last = [0]

    def on_message(message: Any) -> None:
        got[0] += 1
        last[0] = message.delivery_info["delivery_tag"]
        if got[0] % ACK_EVERY == 0:
            channel.basic_ack(last[0], multiple=True)

    with kombu.Connection(amqp_url) as conn:
        channel = conn.channel()
        channel.basic_qos(0, prefetch, False)
        started, cpu = time.perf_counter(), time.process_time()
        channel.basic_consume(queue=queue, callback=on_message, no_ack=False)
        while got[0] < count:
            conn.drain_events(timeout=60)
        if last[0]:
            channel.basic_ack(last[0], multiple=True)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"seconds": round(seconds, 2), "per_second": round(count / seconds),
            "cpu_us_per_notification": round(cpu / count * 1e6)}


def _drain_listener(listener: Any, count: int) -> dict[str, Any]:
    started = time.perf_counter()
    listener.start()
    if not listener.wait_count(count, 3600):
        raise RuntimeError("oslo.messaging's listener stopped short")
    seconds = time.perf_counter() - started
    listener.stop()
    return {"seconds": round(seconds, 2), "per_second": round(count / seconds)}


# -- end to end ------------------------------------------------------------------------------------


def _end_to_end(database: str, transport_url: str, pool: str, topic: str, cloud: str, messages: int, mapped: int,
                batch_size: int, prefetch: int, collectors: int,
                progress: Callable[[str, int], None] | None) -> dict[str, Any]:
    store = open_store(database)
    if store.dialect != "postgres":
        raise BenchOptionError("tally bench collect measures tally serve on Postgres: give a postgresql:// --database")
    # Earlier runs' events stay in the database; a database holding hundreds of thousands stores more slowly
    # (runs in a row in one database fell from 0.49x to 0.33x), so the report says how many there were.
    events_before = store.event_count()
    with tempfile.TemporaryDirectory(prefix="tally-bench-collect-") as tmp, \
            ServeProcess(database, log_path=Path(tmp) / "serve.log") as api, ExitStack() as running:
        config = Path(tmp) / "collector.yaml"
        config.write_text(f"collector:\n  batch_size: {batch_size}\n  prefetch: {prefetch}\n  drain_timeout: 60\n")
        api.start()
        # Several processes read the same queues into one buffer directory, as they would be deployed
        # (docs/collector.md): RabbitMQ hands each message to one of them.
        processes = [running.enter_context(CollectorProcess(
            cloud=cloud, transport_url=transport_url, api_url=api.url, buffer_dir=Path(tmp) / "buffer", config=config,
            extra_args=["--pool", pool, "--topic", topic, "--log-level", "warning"],
            log_path=Path(tmp) / f"collector-{n + 1}.log")) for n in range(collectors)]
        with ThreadPoolExecutor(collectors) as starting:  # side by side: none reads long before the others
            list(starting.map(CollectorProcess.start, processes))
        samples = _Sampler(processes, api, store, cloud).start()
        started = samples.wait_connected()
        finished = samples.wait_stored(mapped, progress)
        samples.stop()
        received, stored_counts = samples.wait_counted(messages, mapped)
        exit_statuses = [process.stop() for process in processes]
    if sum(received) < messages:
        raise CollectorProcessError(f"the collector read {sum(received):.0f} of {messages} messages")
    seconds = finished - started
    rss = samples.rss_report(messages)
    return {
        "events_in_database_before": events_before,
        "seconds": round(seconds, 2),
        "notifications_per_second": round(messages / seconds),
        "events_per_second": round(mapped / seconds),
        "events_stored": samples.stored,
        "collector": {"processes": collectors, "connected_within_s": round(samples.connect_spread, 2),
                      "received": sum(received), "received_per_process": received,
                      "sent": stored_counts, "exit_status": next((s for s in exit_statuses if s), 0),
                      "cpu_seconds": samples.collector_cpu,
                      "cpu_us_per_notification": round(samples.collector_cpu / messages * 1e6),
                      "batch_size": batch_size, "prefetch": prefetch, **rss},
        "api_cpu_seconds": samples.api_cpu,
        "api_cpu_us_per_event": round(samples.api_cpu / max(mapped, 1) * 1e6),
    }


class _Sampler:
    """Polls the store's count of the run's events and the collectors' memory while the run goes.

    CPU is summed over the collector processes; memory is the largest one's (each holds its own)."""

    def __init__(self, collectors: list[CollectorProcess], api: ServeProcess, store: Any, cloud: str):
        self.collectors, self.api, self.store, self.cloud = collectors, api, store, cloud
        self.stored = 0
        self.rss: list[tuple[int, float]] = []  # (events stored, RSS MiB)
        self.collector_cpu = 0.0
        self.api_cpu = 0.0
        self.cpu_at_start = (0.0, 0.0)
        self.connect_spread = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_memory, daemon=True)

    def start(self) -> _Sampler:
        self._thread.start()
        return self

    def wait_connected(self) -> float:
        """Wait until every collector is connected; returns when the first one was, as it reads from then on.

        CPU is counted from each one's connection: the start-up (imports) is not the cost per message."""
        deadline = time.monotonic() + 60
        first: float | None = None
        cpu_at: dict[int, float] = {}
        while True:
            for collector in self.collectors:
                if collector.pid not in cpu_at and (collector.health() or {}).get("broker_connected"):
                    cpu_at[collector.pid] = _cpu_seconds(collector.pid)
                    if first is None:
                        first, api_cpu = time.perf_counter(), _cpu_seconds(self.api.pid)
            if len(cpu_at) == len(self.collectors):
                break
            if time.monotonic() > deadline:
                late = next(c for c in self.collectors if c.pid not in cpu_at)
                raise CollectorProcessError(f"the collector never connected: {late.log_tail()}")
            time.sleep(0.01)  # polling external processes
        assert first is not None
        self.connect_spread = time.perf_counter() - first  # the others joined within this (each polled in turn)
        self.cpu_at_start = (sum(cpu_at.values()), api_cpu)
        return first

    def wait_stored(self, mapped: int, progress: Callable[[str, int], None] | None) -> float:
        deadline = time.monotonic() + 3600
        while True:
            count = self.store.query("SELECT count(*) FROM events WHERE cloud = %s", [self.cloud])[0][0]
            if progress is not None and count > self.stored:
                progress("stored", count - self.stored)
            self.stored = count
            if count >= mapped:
                return time.perf_counter()
            dead = next((c for c in self.collectors if not c.alive()), None)
            if dead is not None or time.monotonic() > deadline:
                raise CollectorProcessError(f"stored {count} of {mapped} events: {(dead or self.collectors[0]).log_tail()}")
            time.sleep(0.1)  # polling the database

    def wait_counted(self, messages: int, mapped: int) -> tuple[list[float], dict[str, float]]:
        """Each collector's count of messages read, and their counts of events sent by outcome, once they
        add up (or after a minute): the sender hears that its events are stored a moment after they
        are, and a batch of messages that map to no event is acknowledged, and counted, at its own pace."""
        deadline = time.monotonic() + 60
        while True:
            received = [c.metric("tally_collector_received_total") for c in self.collectors]
            sent = {o: sum(c.metric("tally_collector_sent_total", outcome=o) for c in self.collectors)
                    for o in ("stored", "duplicate", "rejected")}
            if (sum(received) >= messages and sum(sent.values()) >= mapped) or time.monotonic() > deadline:
                return received, sent
            time.sleep(0.05)  # polling external processes

    def _collectors_cpu(self) -> float:
        return sum(_cpu_seconds(c.pid) for c in self.collectors)

    def _sample_memory(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.rss.append((self.stored, max(c.rss_kib() for c in self.collectors) / 1024))
                self.collector_cpu = round(self._collectors_cpu() - self.cpu_at_start[0], 2)
                self.api_cpu = round(_cpu_seconds(self.api.pid) - self.cpu_at_start[1], 2)
            except (OSError, RuntimeError):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def rss_report(self, messages: int) -> dict[str, Any]:
        if not self.rss:
            return {"rss_flat": False}
        warm = next((mb for stored, mb in self.rss if stored >= self.stored / 10), self.rss[0][1])
        end, top = self.rss[-1][1], max(mb for _, mb in self.rss)
        growth = end - warm
        return {"rss_mb": {"start": round(self.rss[0][1], 1), "after_warmup": round(warm, 1), "end": round(end, 1),
                           "max": round(top, 1)},
                "rss_growth_after_warmup_mb": round(growth, 1),
                "rss_flat": growth <= max(RSS_GROWTH_FLOOR_MB, RSS_GROWTH_ALLOWED * warm)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


# -- the notifications -----------------------------------------------------------------------------


def _wire(message: dict[str, Any]) -> bytes:
    import json

    return json.dumps({**message, "message_id": str(uuid.uuid4()), "timestamp": "2026-01-01 00:00:00.000000"}).encode()


def _mix(count: int, seed: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``count`` notifications shaped like the services' (their fields, their sizes), each about a
    resource of its own; one in ten changes no usage."""
    rng = random.Random(seed)
    makers = (_volume_create, _volume_delete, _volume_create, _server_versioned, _server_versioned,
              _server_legacy, _image_upload, _floating_ip, _load_balancer, _volume_exists)
    for n in range(count):
        yield makers[n % len(makers)](n, rng)


def _project(rng: random.Random) -> str:
    return f"{rng.randrange(200):032x}"


def _volume(n: int, rng: random.Random, status: str) -> dict[str, Any]:
    return {"status": status, "display_name": f"bench-volume-{n}", "availability_zone": "nova",
            "tenant_id": _project(rng), "user_id": f"{rng.randrange(1000):032x}", "created_at": "2026-01-01 00:00:00",
            "volume_id": f"bench-vol-{n}", "volume_type": "3a9a398b-7e3b-40da-b09e-2115ad8cd68b",
            "host": "volumes.example.com@lvm#lvm", "snapshot_id": None, "size": rng.choice((1, 10, 20, 50, 100)),
            "replication_status": "disabled", "replication_extended_status": None, "instance_uuid": None,
            "metadata": [], "volume_attachment": [], "glance_metadata": []}


def _volume_create(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    return EXCHANGE_OF["cinder"], "notifications", {"event_type": "volume.create.end", "priority": "INFO",
                                       "publisher_id": "volume.volumes.example.com",
                                       "payload": _volume(n, rng, "available")}


def _volume_delete(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    return EXCHANGE_OF["cinder"], "notifications", {"event_type": "volume.delete.end", "priority": "INFO",
                                       "publisher_id": "volume.volumes.example.com",
                                       "payload": _volume(n, rng, "deleting")}


def _volume_exists(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    return EXCHANGE_OF["cinder"], "notifications", {"event_type": "volume.exists", "priority": "INFO",
                                       "publisher_id": "volume.volumes.example.com",
                                       "payload": {**_volume(n, rng, "available"), "audit_period_beginning": "x"}}


_FLAVORS = (("m1.small", 1, 2048, 20), ("m1.medium", 2, 4096, 40), ("m1.large", 4, 8192, 80))


def _server_versioned(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    name, vcpus, ram, disk = rng.choice(_FLAVORS)
    flavor = {"nova_object.name": "FlavorPayload", "nova_object.namespace": "nova", "nova_object.version": "1.4",
              "nova_object.data": {"flavorid": f"flavor-{name}", "name": name, "root_gb": disk, "vcpus": vcpus,
                                   "ephemeral_gb": 0, "memory_mb": ram, "disabled": False, "rxtx_factor": 1.0,
                                   "extra_specs": {"hw:watchdog_action": "disabled"}, "projects": None, "swap": 0,
                                   "is_public": True, "vcpu_weight": 0, "description": None}}
    address = {"nova_object.name": "IpPayload", "nova_object.namespace": "nova", "nova_object.version": "1.0",
               "nova_object.data": {"mac": "fa:16:3e:4c:2c:30", "address": f"10.0.{n % 250}.{n % 199 + 2}",
                                    "port_uuid": str(uuid.UUID(int=rng.getrandbits(128))), "meta": {}, "version": 4,
                                    "label": "private", "device_name": "tap0"}}
    data = {"architecture": "x86_64", "availability_zone": "nova", "block_devices": [],
            "created_at": "2026-01-01T00:00:00Z", "deleted_at": None, "display_name": f"bench-server-{n}",
            "display_description": "", "host": "compute-1", "host_name": f"bench-server-{n}",
            "ip_addresses": [address], "kernel_id": "", "key_name": "bench", "launched_at": "2026-01-01T00:00:05Z",
            "image_uuid": "155d900f-4e14-4e4c-a73d-069cbf4541e6", "metadata": {}, "locked": False, "node": "compute-1",
            "os_type": None, "progress": 0, "ramdisk_id": "", "reservation_id": f"r-{n:08x}", "state": "active",
            "task_state": None, "power_state": "running", "tenant_id": _project(rng), "terminated_at": None,
            "auto_disk_config": "MANUAL", "flavor": flavor, "updated_at": "2026-01-01T00:00:05Z", "user_id": "bench",
            "uuid": f"bench-vm-{n}", "request_id": f"req-{uuid.UUID(int=rng.getrandbits(128))}",
            "action_initiator_user": "bench", "action_initiator_project": "bench", "locked_reason": None,
            "shares": [], "fault": None, "keypairs": [], "tags": [], "trusted_image_certificates": None,
            "instance_name": f"instance-{n:08x}"}
    payload = {"nova_object.name": "InstanceCreatePayload", "nova_object.namespace": "nova",
               "nova_object.version": "1.13", "nova_object.data": data}
    return "nova", "versioned_notifications", {"event_type": "instance.create.end", "priority": "INFO",
                                               "publisher_id": "nova-compute:compute-1", "payload": payload}


def _server_legacy(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    name, vcpus, ram, disk = rng.choice(_FLAVORS)
    payload: dict[str, Any] = {"state_description": "", "availability_zone": None, "terminated_at": "", "ephemeral_gb": 0,
               "instance_type_id": 12, "message": "Success", "deleted_at": "", "reservation_id": f"r-{n:08x}",
               "instance_id": f"bench-legacy-vm-{n}", "user_id": "bench", "hostname": f"bench-legacy-{n}",
               "state": "active", "launched_at": "2026-01-01T00:00:05.000000", "metadata": [], "node": "compute-1",
               "ramdisk_id": "", "access_ip_v6": None, "disk_gb": disk, "access_ip_v4": None, "kernel_id": "",
               "host": "compute-1", "display_name": f"bench-legacy-{n}",
               "image_ref_url": "http://glance.example.com:9292/images/155d900f", "root_gb": disk,
               "tenant_id": _project(rng), "created_at": "2026-01-01 00:00:00+00:00", "memory_mb": ram,
               "instance_type": name, "vcpus": vcpus, "image_meta": {"min_disk": "20", "container_format": "bare",
                                                                      "min_ram": "0", "disk_format": "qcow2",
                                                                      "base_image_ref": "155d900f"},
               "architecture": None, "os_type": None, "instance_flavor_id": "2"}
    return "nova", "notifications", {"event_type": "compute.instance.create.end", "priority": "INFO",
                                     "publisher_id": "compute.compute-1", "payload": payload}


def _image_upload(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    payload = {"id": f"bench-image-{n}", "name": f"image-{n}", "status": "active", "owner": _project(rng),
               "size": rng.randrange(1 << 20, 1 << 33), "virtual_size": None, "disk_format": "qcow2",
               "container_format": "bare", "min_disk": 0, "min_ram": 0, "protected": False,
               "checksum": f"{rng.getrandbits(128):032x}", "visibility": "private", "deleted": False,
               "deleted_at": None, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:09Z",
               "tags": [], "properties": {}}
    return "glance", "notifications", {"event_type": "image.upload", "priority": "INFO",
                                       "publisher_id": "image.localhost", "payload": payload}


def _floating_ip(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    project = _project(rng)
    ip: dict[str, Any] = {"id": f"bench-fip-{n}", "tenant_id": project, "project_id": project,
          "floating_ip_address": f"203.0.{n % 250}.{n % 251 + 1}", "floating_network_id": "ext-net",
          "router_id": None, "port_id": None, "fixed_ip_address": None, "status": "DOWN", "description": "",
          "qos_policy_id": None, "port_details": None, "dns_domain": "", "dns_name": "", "tags": [],
          "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "revision_number": 0}
    return "neutron", "notifications", {"event_type": "floatingip.create.end", "priority": "INFO",
                                        "publisher_id": "network.controller", "payload": {"floatingip": ip}}


def _load_balancer(n: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    payload: dict[str, Any] = {"enabled": True, "availability_zone": None, "created_at": "2026-01-01T00:00:00.000000",
               "description": "", "flavor_id": None, "id": f"bench-lb-{n}", "listeners": [], "name": f"lb-{n}",
               "operating_status": "OFFLINE", "pools": [], "project_id": _project(rng), "provider": "amphora",
               "provisioning_status": "PENDING_CREATE", "tags": [], "updated_at": None,
               "vip": {"ip_address": "192.168.100.2", "network_id": "net", "port_id": "port", "qos_policy_id": None,
                       "subnet_id": "subnet"}}
    return "octavia", "notifications", {"event_type": "octavia.loadbalancer.create.end", "priority": "INFO",
                                        "publisher_id": "octavia-worker:host", "payload": payload}
