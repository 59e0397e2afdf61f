"""The machine's RabbitMQ for tests: a vhost of its own per test, its bindings and connections, raw publishes.

``rabbitmqctl`` (run as root) makes and removes vhosts and users; everything else goes over AMQP with
kombu. Services' exchanges are declared as oslo.messaging declares them (topic, not durable, not
auto-deleted: its defaults), standing in for a cloud that has been running.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass

import kombu

from tally_pipeline_tests.faults import wait_until

HOST = os.environ.get("TALLY_TEST_RABBITMQ_HOST", "127.0.0.1:5672")
SERVICES = ("nova", "cinder", "neutron", "glance", "octavia")
#: Where each publishes in a stock deployment: cinder sets no control exchange, so oslo.messaging's default.
EXCHANGE_OF = {"nova": "nova", "cinder": "openstack", "neutron": "neutron", "glance": "glance", "octavia": "octavia"}
EXCHANGES = tuple(EXCHANGE_OF[s] for s in SERVICES)
TOPICS = ("notifications", "versioned_notifications")


def rabbitmqctl(*args: str, timeout: float = 60.0) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def reachable() -> str | None:
    """None when the broker answers AMQP as guest, else why not."""
    try:
        with kombu.Connection(f"amqp://guest:guest@{HOST}//", connect_timeout=3) as conn:
            conn.connect()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@dataclass
class VHost:
    name: str

    def transport_url(self, user: str = "guest", password: str = "guest") -> str:
        """oslo.messaging's URL of this vhost."""
        return f"rabbit://{user}:{password}@{HOST}/{self.name}"

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@{HOST}/{self.name}"

    def declare_exchanges(self, names: tuple[str, ...] = EXCHANGES, *, durable: bool = False) -> None:
        with kombu.Connection(self.amqp_url) as conn:
            channel = conn.channel()
            for name in names:
                channel.exchange_declare(name, "topic", durable=durable, auto_delete=False)

    def delete_exchanges(self, names: tuple[str, ...] = EXCHANGES) -> None:
        """What a broker that lost its state (a restart of a node holding transient exchanges) shows."""
        with kombu.Connection(self.amqp_url) as conn:
            channel = conn.channel()
            for name in names:
                channel.exchange_delete(name)

    def exchanges(self) -> dict[str, tuple[str, bool, bool]]:
        """Every named exchange: (type, durable, auto_delete)."""
        out = rabbitmqctl("list_exchanges", "-p", self.name, "name", "type", "durable", "auto_delete")
        rows = [line.split("\t") for line in out.splitlines()]
        return {r[0]: (r[1], r[2] == "true", r[3] == "true") for r in rows
                if len(r) == 4 and r[0] and not r[0].startswith("amq.") and r[0] != "name"}

    def publish_raw(self, exchange: str, routing_key: str, body: bytes) -> None:
        """One message exactly as given (a poison message, say), persistent like oslo.messaging's."""
        with kombu.Connection(self.amqp_url) as conn:
            conn.Producer().publish(body, exchange=exchange, routing_key=routing_key, serializer=None,
                                    content_type="application/json", content_encoding="utf-8", delivery_mode=2)

    def bindings(self) -> set[tuple[str, str, str]]:
        """(exchange, queue, routing key) of every binding from a named exchange."""
        out = rabbitmqctl("list_bindings", "-p", self.name, "source_name", "destination_name", "routing_key")
        rows = [line.split("\t") for line in out.splitlines() if line.strip()]
        return {(r[0], r[1], r[2]) for r in rows if len(r) == 3 and r[0] and r[0] != "source_name"}

    def wait_for_bindings(self, expected: set[tuple[str, str, str]], timeout: float = 60.0) -> None:
        wait_until(lambda: expected <= self.bindings(), f"bindings {sorted(expected)[:3]}… in {self.name}", timeout)

    def queue_depth(self, queue: str) -> int:
        with kombu.Connection(self.amqp_url) as conn:
            return conn.channel().queue_declare(queue, passive=True).message_count

    def close_connections(self) -> None:
        rabbitmqctl("close_all_connections", "-p", self.name, "a test cuts the broker connections")


def make_vhost() -> VHost:
    vhost = VHost(f"tally-test-{uuid.uuid4().hex[:12]}")
    rabbitmqctl("add_vhost", vhost.name)
    try:
        rabbitmqctl("set_permissions", "-p", vhost.name, "guest", ".*", ".*", ".*")
    except BaseException:
        drop_vhost(vhost)
        raise
    return vhost


def drop_vhost(vhost: VHost) -> None:
    rabbitmqctl("delete_vhost", vhost.name)
