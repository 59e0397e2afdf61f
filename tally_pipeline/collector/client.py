"""``Collector``: events go into a durable on-disk buffer; a sender drains it to ``POST /v1/events``.

Delivery is at-least-once (seed note: delivery semantics). An item leaves the buffer only after a
200 answer names its outcome: ``stored`` and ``duplicate`` delete it, ``rejected`` moves it to the
local rejected log. Everything else — no connection, a timeout, 429, 5xx, 400, 401/403, a process
killed mid-request — keeps it buffered, and a resend is safe because the API deduplicates on
``event_id``. Nothing depends on the order items are drained in.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from tally_pipeline.collector.backoff import Backoff, parse_retry_after
from tally_pipeline.collector.buffer import (
    BufferedItem,
    BufferStatus,
    BusRejection,
    DiskBuffer,
    Order,
    RejectedItem,
    RejectionNote,
)
from tally_pipeline.collector.errors import ApiURLError, CollectorAuthError
from tally_pipeline.collector.protocol import (
    ENVELOPE_OVERHEAD,
    EVENTS_PATH,
    MAX_BATCH,
    batch_body,
    describe,
    encode_event,
    error_fields,
    parse_answer,
)
from tally_pipeline.core.timeutil import format_rfc3339

log = logging.getLogger("tally_pipeline.collector")

Outcome = Literal["empty", "sent", "unavailable", "refused", "unauthorized"]
TOO_LARGE = "event_too_large"
# The API's default body limit (config ``api.max_body_bytes``); a smaller server limit is learned from its 413.
DEFAULT_MAX_BODY = 5 * 1024 * 1024


# Keyword-only, so that a subclass's own fields come first: ``SendResult("sent", stored=3)`` as before.
@dataclass(kw_only=True)
class DeliveryCounts:
    """How the API answered the items sent: per send, and summed over a drain (the one list of counters both keep)."""

    requests: int = 0
    stored: int = 0
    duplicates: int = 0
    conflicts: int = 0
    rejected: int = 0
    rejected_locally: int = 0

    def add_counts(self, other: DeliveryCounts) -> None:
        for counter in fields(DeliveryCounts):
            setattr(self, counter.name, getattr(self, counter.name) + getattr(other, counter.name))


@dataclass
class SendResult(DeliveryCounts):
    """What one ``send_once`` did.

    ``outcome``: ``empty`` (nothing to claim), ``sent`` (every claimed item settled), ``unavailable``
    (no connection, timeout, 408/429/5xx: retry later), ``refused`` (400, another 4xx or an answer
    that does not account for every item: retry later, someone should look), ``unauthorized``
    (401/403: stop).
    """

    outcome: Outcome
    claimed: int = 0
    kept: int = 0
    http_status: int | None = None
    retry_after: float | None = None
    error: str | None = None


@dataclass
class DrainReport(DeliveryCounts):
    """What ``drain`` did, summed over its batches."""

    outcome: Outcome = "empty"
    delays: list[float] = field(default_factory=list)
    remaining: int = 0
    error: str | None = None

    def add(self, r: SendResult) -> None:
        self.outcome = r.outcome
        self.add_counts(r)
        if r.error is not None:
            self.error = r.error


@dataclass(frozen=True, slots=True)
class _Failure:
    outcome: Outcome
    error: str
    status: int | None = None
    retry_after: float | None = None


def events_url(url: str) -> str:
    """The ``POST /v1/events`` URL from the API's base URL (a full ``…/v1/events`` URL is kept)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ApiURLError(url)
    base = url.rstrip("/")
    return base if base.endswith(EVENTS_PATH) else base + EVENTS_PATH


def _iso(ts: float) -> str:
    return format_rfc3339(datetime.fromtimestamp(ts, UTC))


class Collector:
    """A client that never loses what it accepted.

    ``submit`` returns once the event is fsync'd into ``buffer_dir``; ``send_once``/``drain`` or the
    background sender (``start``/``stop``) deliver it. Safe to use from several threads, and several
    processes may share one ``buffer_dir`` (each sender claims its batches; see ``buffer.py``).

    A request holds at most ``batch_size`` events and ``max_body_bytes`` bytes (None: no byte limit
    until the API states one in a 413). ``order`` says which end of the buffer is sent first.
    ``sleep``, ``clock`` and ``rng`` pace the retries; tests pass fakes. Without ``sleep`` the
    background sender's waits end early when ``stop`` is called. ``on_result`` hears every attempt
    of the background sender (for metrics); it must not raise.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        buffer_dir: str | os.PathLike[str],
        *,
        max_buffered: int = 1_000_000,
        max_buffered_bytes: int = 1 << 30,
        max_bus_rejections: int = 100_000,
        max_rejected_bytes: int = 64 << 20,
        reserve_bytes: int = 8 << 20,
        batch_size: int = MAX_BATCH,
        max_body_bytes: int | None = DEFAULT_MAX_BODY,
        order: Order = "oldest",
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        backoff: Backoff | None = None,
        idle_interval: float = 1.0,
        linger: float = 0.05,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        http: httpx.Client | None = None,
        on_result: Callable[[SendResult], None] | None = None,
    ):
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}, got {batch_size}")
        if max_body_bytes is not None and max_body_bytes <= ENVELOPE_OVERHEAD:
            raise ValueError(f"max_body_bytes must exceed {ENVELOPE_OVERHEAD}")
        if order not in ("oldest", "newest"):
            raise ValueError(f"order is 'oldest' or 'newest', got {order!r}")
        self.url = events_url(url)
        self.order: Order = order
        self.backoff = backoff or Backoff()
        self._headers = {"Content-Type": "application/json", "User-Agent": "tally-collector"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._batch_limit = batch_size
        self._body_limit = max_body_bytes
        self._idle_interval = idle_interval
        self._linger = linger
        self._clock = clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._progress = threading.Condition()
        self._custom_sleep = sleep
        self._send_lock = threading.Lock()
        self._failures = 0
        self._on_result = on_result
        self._thread: threading.Thread | None = None
        self.sender_error: CollectorAuthError | None = None
        self._owns_http = http is None
        self._http = http or httpx.Client(timeout=httpx.Timeout(timeout, connect=connect_timeout))
        try:
            self._buffer = DiskBuffer(buffer_dir, max_events=max_buffered, max_bytes=max_buffered_bytes,
                                      max_bus_rejections=max_bus_rejections, max_rejected_bytes=max_rejected_bytes,
                                      reserve_bytes=reserve_bytes)
        except BaseException:
            if self._owns_http:
                self._http.close()
            raise

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sender, give back any claim, close the buffer. Buffered events stay on disk."""
        self.stop()
        try:
            self._buffer.close()
        finally:
            if self._owns_http:
                self._http.close()

    @property
    def buffer(self) -> DiskBuffer:
        return self._buffer

    # -- submitting ---------------------------------------------------------------------------

    def submit(self, event: dict[str, Any]) -> None:
        """Buffer one event; returns once it is on disk. Raises ``BufferFull`` (nothing buffered) at the limit,
        ``BufferDiskFull`` while the disk is full,
        ``TypeError``/``ValueError`` for something that is not a strict-JSON object."""
        self.submit_many((event,))

    def submit_many(self, events: Iterable[dict[str, Any]]) -> int:
        """Buffer events in one fsync'd transaction, all or none; returns how many."""
        entries = []
        for event in events:
            event_id, body = encode_event(event)
            entries.append((event_id, body, len(body.encode("utf-8"))))
        return self.submit_encoded(entries)

    def submit_encoded(
        self, entries: Sequence[tuple[str | None, str, int]], *, rejected: Sequence[BusRejection] = ()
    ) -> int:
        """Buffer ``(event_id, body, size)`` entries made with ``encode_event``, and log ``rejected`` bus
        messages, in one fsync'd transaction, all or none; returns how many events."""
        self._buffer.append(entries, now=self._clock(), rejected=rejected)
        if entries:
            self._wake.set()
        return len(entries)

    # -- reading the buffer -------------------------------------------------------------------

    def buffered(self) -> int:
        return self._buffer.count()

    def status(self) -> BufferStatus:
        return self._buffer.status(self._clock())

    def rejected(self, *, reason: str | None = None, limit: int | None = None) -> list[RejectedItem]:
        return self._buffer.rejected(reason=reason, limit=limit)

    # -- sending ------------------------------------------------------------------------------

    def send_once(self) -> SendResult:
        """Claim one batch (at most ``batch_size`` items), post it, and settle each item by its outcome.

        Never sleeps. A 413 splits the batch and sends the parts within this call.
        """
        with self._send_lock:
            self._buffer.recover_dead_claims()
            budget = None if self._body_limit is None else self._body_limit - ENVELOPE_OVERHEAD
            items = self._buffer.claim(limit=self._batch_limit, max_bytes=budget, order=self.order, now=self._clock())
            if not items:
                return SendResult("empty")
            result = SendResult("sent", claimed=len(items))
            failure: _Failure | None = None
            try:
                if self._body_limit is not None:
                    items = self._reject_oversize(items, self._body_limit, "the body limit", result)
                if items:
                    failure = self._deliver(items, result)
            finally:
                result.kept = self._buffer.release_all()
            if failure is not None:
                result.outcome = failure.outcome
                result.error = failure.error
                result.http_status = failure.status
                result.retry_after = failure.retry_after
                self._failures += 1
            else:
                self._failures = 0
            self._note(result)
            return result

    def next_delay(self, result: SendResult) -> float:
        """How long to wait after a failed send (exponential backoff, jitter, ``Retry-After`` as a floor)."""
        return self.backoff.delay(max(1, self._failures), self._rng, result.retry_after)

    def drain(self, *, retry_for: float = 0.0) -> DrainReport:
        """Send batches until nothing is left to claim.

        After a failure it backs off and retries while the next attempt falls within ``retry_for``
        seconds of the start; with the default 0 it returns at the first failure. Raises
        ``CollectorAuthError`` on 401/403 (everything stays buffered).
        """
        deadline = self._clock() + retry_for
        report = DrainReport()
        while True:
            result = self.send_once()
            report.add(result)
            if result.outcome == "empty":
                break
            if result.outcome == "sent":
                continue
            if result.outcome == "unauthorized":
                raise CollectorAuthError(result.error or "unauthorized", status=result.http_status or 401,
                                         buffered=self.buffered())
            delay = self.next_delay(result)
            if self._clock() + delay > deadline:
                break
            report.delays.append(delay)
            (self._custom_sleep or time.sleep)(delay)
        report.remaining = self.buffered()
        return report

    def start(self) -> None:
        """Run the sender in a background thread until ``stop``/``close`` (or a 401/403)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self.sender_error = None
        self._thread = threading.Thread(target=self._run, name="tally-collector-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the background sender; an in-flight request finishes (bounded by the HTTP timeout)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_until_empty(self, timeout: float) -> bool:
        """Block until the buffer holds nothing (True) or ``timeout`` seconds pass or the sender stops (False)."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while True:
                if self._buffer.count() == 0:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not self.running:
                    return False
                self._progress.wait(min(left, max(self._idle_interval, 0.05)))

    # -- internals ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.send_once()
            except Exception as exc:  # the buffer itself failed (disk full, lock timeout): keep trying
                log.exception("collector sender: the buffer failed")
                self._failures += 1
                result = SendResult("refused", error=f"buffer error: {exc}")
            if self._on_result is not None:
                self._on_result(result)
            self._signal_progress()
            if result.outcome == "sent":
                continue
            if result.outcome == "empty":
                self._wake.wait(self._idle_interval)
                self._wake.clear()
                if self._linger > 0 and not self._stop.is_set():
                    self._stop.wait(self._linger)  # let a burst of submits share one request
                continue
            if result.outcome == "unauthorized":
                self.sender_error = CollectorAuthError(
                    result.error or "unauthorized", status=result.http_status or 401, buffered=self.buffered()
                )
                log.error("collector sender stopped: %s", self.sender_error)
                break
            # Without an injected sleep, wait on the stop flag so stop() ends a long backoff at once.
            (self._custom_sleep or self._stop.wait)(self.next_delay(result))
        self._signal_progress()

    def _signal_progress(self) -> None:
        with self._progress:
            self._progress.notify_all()

    def _deliver(self, items: Sequence[BufferedItem], result: SendResult) -> _Failure | None:
        """Post ``items`` and settle what the answer names; a failure keeps the rest claimed (released later)."""
        result.requests += 1
        try:
            response = self._http.post(self.url, content=batch_body([i.body for i in items]), headers=self._headers)
        except httpx.HTTPError as exc:
            return _Failure("unavailable", f"cannot reach {self.url}: {type(exc).__name__}: {exc}")
        status = response.status_code
        result.http_status = status
        if status == 200:
            return self._apply_answer(items, response.content, result)
        if status == 413:
            return self._split(items, response.content, result)
        what = describe(status, response.content)
        if status in (401, 403):
            which = "token" if status == 401 else "token's scope"
            return _Failure("unauthorized", f"the API at {self.url} refused the collector's {which}: {what}", status)
        if status in (408, 429) or status >= 500:
            retry_after = parse_retry_after(response.headers.get("Retry-After"), self._clock())
            return _Failure("unavailable", f"the API is unavailable: {what}", status, retry_after)
        if status == 400:
            # The collector only sends JSON it produced itself, so this is a bug on one side or the other.
            log.error("the API could not read a batch of %d events this collector built (%s); "
                      "the events stay buffered and will be retried — please report this", len(items), what)
            return _Failure("refused", f"the API refused a well-formed batch: {what}", status)
        log.error("unexpected answer from %s: %s; the events stay buffered", self.url, what)
        return _Failure("refused", f"unexpected answer: {what}", status)

    def _apply_answer(self, items: Sequence[BufferedItem], content: bytes, result: SendResult) -> _Failure | None:
        answer = parse_answer(content)
        if isinstance(answer, str):
            log.error("%s; %d events stay buffered", answer, len(items))
            return _Failure("refused", answer, 200)
        done: list[int] = []
        rejected: list[RejectionNote] = []
        problems: list[str] = []
        seen: set[int] = set()
        for r in answer.results:
            if not 0 <= r.index < len(items) or r.index in seen:
                problems.append(f"result index {r.index} is out of range or repeated")
                continue
            item = items[r.index]
            if r.status != "rejected" and item.event_id is not None and r.event_id != item.event_id:
                problems.append(f"result {r.index} names event_id {r.event_id!r}, the item sent there is {item.event_id!r}")
                continue
            seen.add(r.index)
            if r.status == "stored":
                result.stored += 1
                done.append(item.seq)
            elif r.status == "duplicate":
                result.duplicates += 1
                done.append(item.seq)
                if r.conflict:
                    result.conflicts += 1
                    log.warning("event %r was already stored with different content (the first write wins; "
                                "the API dead-letters this copy as duplicate_conflict)", item.event_id)
            else:
                result.rejected += 1
                rejected.append(RejectionNote(item.seq, r.reason or "unspecified", r.message, "api"))
        self._buffer.settle(done=done, rejected=rejected, now=self._clock())
        if rejected:
            log.warning("the API rejected %d of %d events; they are in the collector's rejected log",
                        len(rejected), len(items))
        missing = len(items) - len(seen)
        if missing:
            problems.append(f"{missing} of {len(items)} items have no usable result")
        if problems:
            message = "the API's answer did not account for every item: " + "; ".join(problems[:5])
            log.error("%s; those items stay buffered", message)
            return _Failure("refused", message, 200)
        return None

    def _split(self, items: Sequence[BufferedItem], content: bytes, result: SendResult) -> _Failure | None:
        """Answer to a 413: learn the limit the API states, send the batch in smaller parts."""
        fields = error_fields(content)
        kind = fields.get("error")
        # The API states the count limit as "max" and the byte limit as "max_bytes".
        limit = fields.get("max_bytes" if kind == "body_too_large" and "max_bytes" in fields else "max")
        limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
        what = describe(413, content)
        if len(items) == 1:
            self._reject_oversize(items, None, f"the API refused it alone: {what}", result)
            return None
        parts: list[Sequence[BufferedItem]] | None = None
        if kind == "batch_too_large" and limit is not None:
            self._batch_limit = min(self._batch_limit, limit)
            parts = [items[i : i + limit] for i in range(0, len(items), limit)]
        elif kind == "body_too_large" and limit is not None and limit > ENVELOPE_OVERHEAD:
            self._body_limit = min(self._body_limit or limit, limit)
            fitting = self._reject_oversize(items, limit, f"the API's body limit ({what})", result)
            parts = _pack(fitting, limit - ENVELOPE_OVERHEAD)
        if parts is None or (len(parts) == 1 and len(parts[0]) == len(items)):
            half = len(items) // 2  # no usable limit stated, or it would not split: halve
            parts = [items[:half], items[half:]]
        log.warning("the API answered %s to a batch of %d events; sending it in %d parts", what, len(items), len(parts))
        for part in parts:
            failure = self._deliver(part, result) if part else None
            if failure is not None:
                return failure
        return None

    def _reject_oversize(
        self, items: Sequence[BufferedItem], limit: int | None, why: str, result: SendResult
    ) -> list[BufferedItem]:
        """Move items whose request alone would exceed ``limit`` bytes to the rejected log; return the rest.

        With ``limit`` None every item given is rejected (the API refused it alone).
        """
        keep: list[BufferedItem] = []
        refused: list[RejectionNote] = []
        for item in items:
            request = item.size + ENVELOPE_OVERHEAD
            if limit is not None and request <= limit:
                keep.append(item)
                continue
            if limit is None:
                because = why
            else:
                because = f"a request holding only this event ({request} bytes) exceeds {why} of {limit} bytes"
            refused.append(RejectionNote(
                item.seq, TOO_LARGE, f"{TOO_LARGE}: the event is {item.size} bytes of JSON and {because}", "local"
            ))
        if refused:
            self._buffer.settle(done=(), rejected=refused, now=self._clock())
            result.rejected_locally += len(refused)
            log.error("%d events are too large to send; moved to the collector's rejected log", len(refused))
        return keep

    def _note(self, result: SendResult) -> None:
        now = _iso(self._clock())
        values: dict[str, str | None] = {
            "last_attempt_at": now,
            "last_outcome": result.outcome,
            "last_http_status": None if result.http_status is None else str(result.http_status),
            "consecutive_failures": str(self._failures),
        }
        if result.error is None:
            values["last_success_at"] = now
        else:
            values["last_error"] = result.error
            values["last_error_at"] = now
        try:
            self._buffer.note_sender(values)
        except Exception:  # a note is for people; never let it break delivery
            log.exception("could not record the sender's state")


def _pack(items: Sequence[BufferedItem], budget: int) -> list[Sequence[BufferedItem]]:
    """Greedy packing into parts whose joined bodies fit ``budget`` bytes."""
    parts: list[Sequence[BufferedItem]] = []
    current: list[BufferedItem] = []
    used = 0
    for item in items:
        cost = item.size + (1 if current else 0)
        if current and used + cost > budget:
            parts.append(current)
            current, used = [], 0
            cost = item.size
        current.append(item)
        used += cost
    if current:
        parts.append(current)
    return parts
