"""Reading a cloud's notification bus (RabbitMQ) into the collector's disk buffer, at least once.

**Queues.** The collector owns one queue per topic, ``<pool>.<topic>`` (``tally.notifications``,
``tally.versioned_notifications``), each bound on every service's exchange (``nova``, ``openstack``
for cinder, …: ``service_exchanges``) with the routing key ``<topic>.*``: every priority
oslo.messaging publishes under (``info``, ``error``, …). RabbitMQ gives every bound queue its own
copy of a message, so ceilometer's queues, and the services' default ``<topic>.<priority>`` queues,
keep theirs.

**Bound from the first second.** A service declares its exchange only when it first publishes, and
a topic exchange with no queue bound drops what it routes: waiting for the exchange to appear loses
the first messages after every broker restart. So at each connection (and again every
``rebind_every`` seconds, in case an exchange was deleted under us) the collector declares each
exchange exactly as oslo.messaging's notifier does (type topic, ``durable`` and ``auto_delete`` as
the services' ``amqp_durable_queues`` and ``amqp_auto_delete``), then binds. A declaration the
broker refuses for want of the configure permission falls back to a passive bind (a missing
exchange is then tried again later). An exchange that exists with other attributes
(PRECONDITION_FAILED, which closes only that channel) is reported — logged once, a gauge,
``/healthz`` — and bound as it is: never deleted nor replaced (declared again only at a
reconnection, refused alike), so the service keeps publishing.

**At least once.** Messages are read in batches (at most ``batch_size``, at most ``batch_timeout``
seconds old). A batch is written to the buffer in one fsync'd transaction — its events, and its
rejected messages with their raw bodies — and only then acknowledged, with one ``multiple`` ack.
Whatever is not acknowledged when the connection or the process dies is delivered again by the
broker; the API absorbs the second copy (event ids derive from the notification). While the buffer
refuses (full, or the disk fails) the batch stays unacknowledged and the broker stops delivering
at ``prefetch`` messages per queue: back-pressure instead of loss.

**Why kombu, not oslo.messaging's listener** (docs/collector.md has the measurement): the listener
discards a message it cannot decode before any endpoint sees it, drops one with an unknown priority,
and a batch holding a message whose priority is not a string fails whole (requeued forever, or
acknowledged unread); it also hides the exchange a message came by. Reading the body ourselves lets
every message reach an outcome, and kombu consumed the same messages about three times faster.
The wire format is oslo.messaging's all the same: its notifiers publish, this reads their envelope.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kombu
from amqp.exceptions import AccessRefused, NotFound, PreconditionFailed

from tally_pipeline.collector.amqp_reading import buffer_reads, read_frames
from tally_pipeline.collector.backoff import Backoff
from tally_pipeline.collector.buffer import BusRejection
from tally_pipeline.collector.client import Collector
from tally_pipeline.collector.intake import Ignored, Mapped, Outcome, RawCopy, Rejected, raw_copy
from tally_pipeline.collector.metrics import CollectorMetrics

log = logging.getLogger("tally_pipeline.collector")

#: How often the heartbeat is checked (kombu sends and checks heartbeats only when asked to).
HEARTBEAT_CHECK_EVERY = 1.0
#: Longest wait for the broker in one read, so a stop is noticed quickly.
MAX_READ_WAIT = 1.0


def queue_name(pool: str, topic: str) -> str:
    """The collector's queue for ``topic``: its own, so no other consumer takes its messages."""
    return f"{pool}.{topic}"


def binding_key(topic: str) -> str:
    """Every priority of ``topic``: oslo.messaging routes a notification by ``<topic>.<priority>``."""
    return f"{topic}.*"


@dataclass(frozen=True)
class BusSettings:
    """Where and how to read. ``broker_urls`` hold credentials; ``broker`` names the broker for logs."""

    broker_urls: tuple[str, ...]
    broker: str
    pool: str
    topics: tuple[str, ...]
    #: (service, the exchange it publishes on); several services may share one exchange
    service_exchanges: tuple[tuple[str, str], ...]
    durable: bool = True
    #: how the services declare their exchanges (oslo.messaging's amqp_durable_queues, amqp_auto_delete)
    exchange_durable: bool = False
    exchange_auto_delete: bool = False
    queue_type: str = "classic"
    prefetch: int = 1000
    batch_size: int = 500
    batch_timeout: float = 0.2
    heartbeat: int = 60
    connect_timeout: float = 10.0
    reconnect: Backoff = field(default_factory=lambda: Backoff(base=1.0, factor=2.0, max_delay=60.0))
    #: how long a refused batch waits before it is offered to the buffer again, at most
    blocked_max_delay: float = 10.0
    rebind_every: float = 30.0

    def queue_arguments(self) -> dict[str, Any]:
        return {"x-queue-type": "quorum"} if self.queue_type == "quorum" else {}

    @property
    def exchanges(self) -> tuple[str, ...]:
        """The exchanges bound: each service's, once, in the configured order."""
        return tuple(dict.fromkeys(exchange for _, exchange in self.service_exchanges))


@dataclass
class ExchangeState:
    """What the collector knows of one exchange on the current connection (read by ``/healthz``)."""

    bound: bool = False
    #: "declared" (as the services declare it, or already so), "passive" (no configure permission: bound
    #: only once it exists) or "mismatch" (exists with other attributes: bound as it is); None: not tried
    declared: str | None = None
    why_unbound: str | None = None
    mismatch: str | None = None  # the broker's words on the attributes that differ
    last_message_at: float | None = None  # wall clock, when a message from it was last acknowledged

    def as_json(self) -> dict[str, Any]:
        at = self.last_message_at
        return {**self.__dict__, "last_message_at": None if at is None else datetime.fromtimestamp(at, UTC).isoformat()}


@dataclass(slots=True)
class _Delivery:
    tag: int
    exchange: str
    topic: str
    outcome: Outcome
    raw: RawCopy | None  # an excerpt of the body, its size and digest: kept only for a rejected message


class BusConsumer:
    """Consumes the collector's queues into ``collector`` until ``stop``; reconnects with backoff.

    ``read`` turns a message body into its outcome (``intake.read_message`` with the cloud bound).
    ``run`` blocks; call it in a thread and ``stop`` from another.
    """

    def __init__(self, settings: BusSettings, collector: Collector, read: Callable[[bytes], Outcome],
                 metrics: CollectorMetrics, *, rng: random.Random | None = None):
        self.settings = settings
        self._collector = collector
        self._read = read
        self._metrics = metrics
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._pending: list[_Delivery] = []
        self._flush_due = 0.0
        self._blocked_failures = 0
        self._bound: set[str] = set()
        #: exchanges not bound, and why ("does not exist yet", "may not be read by this user")
        self.unbound: dict[str, str] = {}
        self.exchanges: dict[str, ExchangeState] = {e: ExchangeState() for e in settings.exchanges}
        self._next_rebind = 0.0
        self.connected = False
        self.last_error: str | None = None

    def stop(self) -> None:
        self._stop.set()

    # -- the connection's life ------------------------------------------------------------------

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            url = self.settings.broker_urls[failures % len(self.settings.broker_urls)]
            conn = kombu.Connection(
                url, heartbeat=self.settings.heartbeat, connect_timeout=self.settings.connect_timeout,
                transport_options={"client_properties": {"connection_name": f"tally-collector {os.getpid()}"}},
            )
            try:
                conn.connect()
                buffer_reads(conn)
                channel, consumer_tags = self._open(conn)
                failures = 0
                self._set_connected(True)
                self._consume(conn, channel, consumer_tags)
            except Exception as exc:  # any failure of the connection or the channel: start over
                self._set_connected(False)
                self._pending.clear()  # never acknowledged: the broker delivers them again
                if self._stop.is_set():
                    break
                failures += 1
                self.last_error = _describe(exc)
                self._metrics.broker_connection_failures.inc()
                delay = self.settings.reconnect.delay(failures, self._rng)
                log.warning("broker %s: %s; reconnecting in %.1f s", self.settings.broker, self.last_error, delay)
                self._stop.wait(delay)
            finally:
                self._set_connected(False)
                _quietly(conn.release)

    def _set_connected(self, yes: bool) -> None:
        if yes and not self.connected:
            log.info("consuming %s from %s (queues %s)", ", ".join(self.settings.exchanges), self.settings.broker,
                     ", ".join(queue_name(self.settings.pool, t) for t in self.settings.topics))
        self.connected = yes
        self._metrics.broker_connected.set(1 if yes else 0)
        if not yes:
            for exchange in self._bound:
                self._metrics.exchange_bound.labels(exchange).set(0)
                self.exchanges[exchange].bound = False
            self._bound.clear()

    def _open(self, conn: kombu.Connection) -> tuple[Any, list[str]]:
        s = self.settings
        channel = conn.channel()
        channel.basic_qos(0, s.prefetch, False)
        for topic in s.topics:
            channel.queue_declare(queue=queue_name(s.pool, topic), durable=s.durable, auto_delete=False,
                                  arguments=s.queue_arguments())
        self._bind(conn, declare=True)
        self._next_rebind = time.monotonic() + s.rebind_every
        # py-amqp's own consumer callback: kombu's Message wrapper and its decoding would only add cost
        # (the body is read here, as bytes, whatever its content type says).
        tags = [channel.basic_consume(queue=queue_name(s.pool, topic), callback=self._receiver(topic), no_ack=False)
                for topic in s.topics]
        return channel, tags

    def _bind(self, conn: kombu.Connection, *, declare: bool) -> None:
        """Declare (with ``declare``: at connection) and bind every exchange. Later calls declare again
        only what was declared before (so an exchange deleted under us comes back), bind what is not
        bound yet and bind again what is (both idempotent), and leave a mismatched exchange as it is."""
        for exchange in self.settings.exchanges:
            state = self.exchanges[exchange]
            if declare or state.declared == "declared":
                state.declared = self._declare(conn, exchange)
            self._bind_one(conn, exchange, state)

    def _declare(self, conn: kombu.Connection, exchange: str) -> str:
        """Declare ``exchange`` as oslo.messaging's notifier does; say how it went. Each declaration has its
        own channel: a refused one closes its channel (and only it)."""
        s = self.settings
        state = self.exchanges[exchange]
        channel = conn.channel()
        try:
            channel.exchange_declare(exchange, "topic", durable=s.exchange_durable, auto_delete=s.exchange_auto_delete)
        except AccessRefused as exc:
            if state.declared != "passive":
                log.info("may not declare exchange %r on %s (no configure permission: %s); binding it once its "
                         "service has declared it", exchange, s.broker, _describe(exc))
            return "passive"
        except PreconditionFailed as exc:
            text = _describe(exc)
            if state.mismatch != text:
                log.error("exchange %r on %s exists with other attributes than durable=%s auto_delete=%s (%s): bound "
                          "as it is, left as the services made it; set collector.amqp_durable_queues / amqp_auto_delete as the "
                          "services' [oslo_messaging_rabbit] options", exchange, s.broker, s.exchange_durable,
                          s.exchange_auto_delete, text)
            state.mismatch = text
            self._metrics.exchange_mismatch.labels(exchange).set(1)
            return "mismatch"
        finally:
            _quietly(channel.close)
        if state.mismatch is not None:
            log.info("exchange %r on %s now has the attributes the services declare", exchange, s.broker)
        state.mismatch = None
        self._metrics.exchange_mismatch.labels(exchange).set(0)
        return "declared"

    def _bind_one(self, conn: kombu.Connection, exchange: str, state: ExchangeState) -> None:
        """Bind the queues on ``exchange``; a missing one is tried again later. A channel of its own: binding
        to an exchange that does not exist closes the channel."""
        s = self.settings
        channel = conn.channel()
        try:
            for topic in s.topics:
                channel.queue_bind(queue=queue_name(s.pool, topic), exchange=exchange, routing_key=binding_key(topic))
        except (NotFound, AccessRefused) as exc:
            self._metrics.exchange_bound.labels(exchange).set(0)
            self._bound.discard(exchange)
            state.bound = False
            missing = isinstance(exc, NotFound)
            why = "does not exist yet" if missing else "may not be read by this user"
            if self.unbound.get(exchange) != why:
                log.log(logging.WARNING if missing else logging.ERROR,
                        "exchange %r %s on %s (%s); trying again every %.0f s", exchange, why, s.broker,
                        "its service has not published since the broker started, and this user may not declare it"
                        if missing else f"see the permissions in docs/collector.md: {_describe(exc)}", s.rebind_every)
            self.unbound[exchange] = why
            state.why_unbound = why
            return
        finally:
            _quietly(channel.close)
        if exchange not in self._bound:
            self._bound.add(exchange)
            self.unbound.pop(exchange, None)
            state.bound, state.why_unbound = True, None
            self._metrics.exchange_bound.labels(exchange).set(1)

    def bound_exchanges(self) -> list[str]:
        return sorted(self._bound)

    # -- reading --------------------------------------------------------------------------------

    def _receiver(self, topic: str) -> Callable[[Any], None]:
        def on_message(message: Any) -> None:
            body = message.body
            if isinstance(body, str):  # py-amqp decodes a body whose content_encoding it knows
                body = body.encode("utf-8", "surrogatepass")
            outcome = self._read(body)
            if not self._pending:
                self._flush_due = time.monotonic() + self.settings.batch_timeout
            info = message.delivery_info
            self._pending.append(_Delivery(
                info["delivery_tag"], info.get("exchange", ""), topic, outcome,
                raw_copy(body) if isinstance(outcome, Rejected) else None,
            ))
        return on_message

    def _consume(self, conn: kombu.Connection, channel: Any, consumer_tags: Sequence[str]) -> None:
        s = self.settings
        next_heartbeat = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            wait = MAX_READ_WAIT if not self._pending else min(MAX_READ_WAIT, max(0.001, self._flush_due - now))
            try:
                read_frames(conn, wait)  # every frame already received, under one timeout
            except TimeoutError:
                pass
            now = time.monotonic()
            if self._pending and (len(self._pending) >= s.batch_size or now >= self._flush_due):
                self._flush(channel)
            if now >= next_heartbeat:
                conn.heartbeat_check(rate=2)
                next_heartbeat = now + HEARTBEAT_CHECK_EVERY
            if now >= self._next_rebind:
                self._bind(conn, declare=False)
                self._next_rebind = time.monotonic() + s.rebind_every
        # Stopping: no new deliveries; what was read is buffered and acknowledged if the buffer takes
        # it, else left unacknowledged for the broker to deliver again.
        for tag in consumer_tags:
            _quietly(functools.partial(channel.basic_cancel, tag))
        if self._pending:
            self._flush(channel, final=True)

    def _flush(self, channel: Any, *, final: bool = False) -> None:
        batch = self._pending
        entries = [(o.event_id, o.body, o.size) for d in batch if isinstance(o := d.outcome, Mapped)]
        rejections = [BusRejection(o.message_id, d.raw.excerpt if d.raw else "", o.reason, o.message,
                                   d.raw.size if d.raw else None, d.raw.digest if d.raw else None)
                      for d in batch if isinstance(o := d.outcome, Rejected)]
        try:
            self._collector.submit_encoded(entries, rejected=rejections)
        except Exception as exc:  # full or failing: hold the batch (unacknowledged), offer it again later
            self._blocked(exc, len(batch), final)
            return
        if self._blocked_failures:
            log.info("the buffer takes events again")
            self._blocked_failures = 0
            self._metrics.buffer_blocked.set(0)
        channel.basic_ack(batch[-1].tag, multiple=True)
        self._pending = []
        self._count(batch)

    def _blocked(self, exc: Exception, held: int, final: bool) -> None:
        self._blocked_failures += 1
        self._metrics.buffer_blocked.set(1)
        delay = min(self.settings.blocked_max_delay, 0.5 * 2 ** min(self._blocked_failures - 1, 8))
        self._flush_due = time.monotonic() + delay
        if final:
            log.warning("stopping with %d messages the buffer would not take (%s): left unacknowledged, the broker "
                        "delivers them again", held, exc)
        elif self._blocked_failures == 1 or self._blocked_failures % 30 == 0:
            log.error("the buffer refuses a batch of %d messages (%s); they stay unacknowledged and the broker holds "
                      "the rest; trying again in %.1f s", held, exc, delay)

    def _count(self, batch: Sequence[_Delivery]) -> None:
        """Count a batch once it is acknowledged (so a redelivered message is counted per delivery)."""
        m = self._metrics
        received: Counter[tuple[str, str]] = Counter()
        ignored: Counter[str] = Counter()
        rejected: Counter[str] = Counter()
        mapped = 0
        for d in batch:
            received[(m.exchange_label(d.exchange), d.topic)] += 1
            outcome = d.outcome
            if isinstance(outcome, Mapped):
                mapped += 1
            elif isinstance(outcome, Ignored):
                ignored[outcome.code] += 1
            else:
                rejected[outcome.reason] += 1
        now = time.time()
        for (exchange, topic), n in received.items():
            m.received.labels(exchange, topic).inc(n)
            m.last_message.labels(exchange).set(now)
            if (state := self.exchanges.get(exchange)) is not None:
                state.last_message_at = now
        m.mapped.inc(mapped)
        for code, n in ignored.items():
            m.ignored.labels(code).inc(n)
        for reason, n in rejected.items():
            m.rejected.labels(reason).inc(n)


def _describe(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


def _quietly(action: Callable[[], Any]) -> None:
    try:
        action()
    except Exception:  # closing what may already be broken
        pass
