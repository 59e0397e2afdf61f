"""A cloud's side of the notification bus, played with oslo.messaging itself: its ``Notifier`` publishing as
each service does, and its notification listener consuming in a pool of its own (as ceilometer does).

Used by ``tally bench collect`` and by the tests, so both publish exactly what a real service sends:
the ``messagingv2`` envelope, the service's control exchange, ``<topic>.<priority>`` routing keys.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # oslo.messaging's imports announce eventlet's deprecation
    import oslo_messaging
    from oslo_config import cfg

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")
# set_transport_defaults changes a process-wide default that the next transport reads: one at a time.
_TRANSPORT_LOCK = threading.Lock()


def notification_transport(url: str, exchange: str, *, durable: bool = False) -> Any:
    """A notification transport whose notifiers publish on ``exchange``, as a service whose
    ``[DEFAULT] control_exchange`` is ``exchange`` does (and whose ``[oslo_messaging_rabbit]
    amqp_durable_queues`` is ``durable``). The control exchange is read when the transport is made,
    so each service gets a transport of its own."""
    conf = cfg.ConfigOpts()
    conf([], project="tally-bench")
    with _TRANSPORT_LOCK:
        oslo_messaging.set_transport_defaults(control_exchange=exchange)
        transport = oslo_messaging.get_notification_transport(conf, url=url)
    if durable:  # the driver registered its options; its connections read them when first made
        conf.set_override("amqp_durable_queues", True, group="oslo_messaging_rabbit")
    return transport


class ServicePublishers:
    """oslo.messaging notifiers, one per (service exchange, topic), created on first use."""

    def __init__(self, url: str, *, durable: bool = False):
        self.url = url
        self.durable = durable
        self._transports: dict[str, Any] = {}
        self._notifiers: dict[tuple[str, str], Any] = {}
        self._prepared: dict[tuple[str, str, str], Any] = {}

    def publish(self, exchange: str, topic: str, message: Mapping[str, Any],
                context: Any = None) -> None:
        """Send ``message``'s event type, payload, priority and publisher id (none if it has none) as the
        service would; the notifier gives it a new message_id and timestamp, as it does for every one.
        ``context`` is the request context (an object with ``redacted_copy`` and ``to_dict``, as oslo.context's),
        which oslo.messaging packs in as ``_context_*`` fields."""
        notifier = self._notifiers.get((exchange, topic))
        if notifier is None:
            if exchange not in self._transports:
                self._transports[exchange] = notification_transport(self.url, exchange, durable=self.durable)
            notifier = oslo_messaging.Notifier(self._transports[exchange], publisher_id=None,
                                               driver="messagingv2", topics=[topic])
            self._notifiers[(exchange, topic)] = notifier
        publisher = message.get("publisher_id")
        if isinstance(publisher, str) and publisher:
            key = (exchange, topic, publisher)
            prepared = self._prepared.get(key)
            if prepared is None:
                prepared = self._prepared[key] = notifier.prepare(publisher_id=publisher)
            notifier = prepared
        priority = str(message.get("priority") or "info").lower()
        getattr(notifier, "warn" if priority == "warning" else priority)(context or {}, message["event_type"], message["payload"])

    def close(self) -> None:
        for transport in self._transports.values():
            transport.cleanup()
        self._transports.clear()
        self._notifiers.clear()
        self._prepared.clear()


@dataclass
class Heard:
    """One notification as an oslo.messaging listener hands it over."""

    priority: str
    publisher_id: str | None
    event_type: str | None
    payload: Any
    metadata: dict[str, Any]

    def as_message(self) -> dict[str, Any]:
        """The notification as it was on the wire (oslo.messaging writes the priority in capitals)."""
        return {"message_id": self.metadata.get("message_id"), "timestamp": self.metadata.get("timestamp"),
                "publisher_id": self.publisher_id, "event_type": self.event_type,
                "priority": self.priority.upper(), "payload": self.payload}


@dataclass
class _Endpoint:
    keep: bool
    heard: list[Heard] = field(default_factory=list)
    count: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __getattr__(self, name: str) -> Any:
        if name not in PRIORITIES:
            raise AttributeError(name)

        def handle(ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: dict[str, Any]) -> None:
            with self.changed:
                self.count += 1
                if self.keep:
                    self.heard.append(Heard(name, publisher_id, event_type, payload, dict(metadata)))
                self.changed.notify_all()
        return handle


class PoolListener:
    """oslo.messaging's notification listener in ``pool`` on every (exchange, topic), every priority:
    what ceilometer's notification agent runs. ``keep`` keeps each notification heard (else counts)."""

    def __init__(self, url: str, pool: str, exchanges: Iterable[str], topics: Iterable[str], *, keep: bool = True):
        self._endpoint = _Endpoint(keep)
        self._transport = notification_transport(url, "openstack")
        targets = [oslo_messaging.Target(exchange=e, topic=t) for e in exchanges for t in topics]
        self._server = oslo_messaging.get_notification_listener(self._transport, targets, [self._endpoint],
                                                                executor="threading", pool=pool)

    @property
    def heard(self) -> list[Heard]:
        with self._endpoint.changed:
            return list(self._endpoint.heard)

    @property
    def count(self) -> int:
        return self._endpoint.count

    def wait_count(self, count: int, timeout: float) -> bool:
        with self._endpoint.changed:
            return self._endpoint.changed.wait_for(lambda: self._endpoint.count >= count, timeout)

    def start(self) -> PoolListener:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._server.wait()

    def close(self) -> None:
        self._transport.cleanup()
