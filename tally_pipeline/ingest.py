"""The ingest core: the only route into ``events``, shared by the API, landing files and reconciliation.

A batch of received items goes in; one outcome per item comes out, in order: ``stored``,
``duplicate`` (the event_id is already held; first write wins) or ``rejected`` (with a reason).
The whole batch is one transaction: stored events and dead-letter rows commit together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from tally_pipeline.core.envelope import EventRecord, Rejection, validate_event
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.store.base import RejectedRow, Store, UnitOfWork

MAX_BATCH = 1000
Status = Literal["stored", "duplicate", "rejected"]


class BatchTooLarge(ValueError):
    def __init__(self, size: int):
        super().__init__(f"a batch holds at most {MAX_BATCH} events, got {size}")
        self.size = size


@dataclass(slots=True)
class ItemOutcome:
    index: int
    event_id: str | None
    status: Status
    cloud: str | None = None
    reason: str | None = None
    message: str | None = None
    conflict: bool = False

    def as_json(self) -> dict[str, Any]:
        """The item's entry in an HTTP response (DESIGN.md §4.3)."""
        out: dict[str, Any] = {"index": self.index, "event_id": self.event_id, "status": self.status}
        if self.reason is not None:
            out["reason"] = self.reason
            out["message"] = self.message
        if self.conflict:
            out["conflict"] = True
        return out


@dataclass
class PreparedBatch:
    """A validated batch, ready to store: what each item is, before the store has a say."""

    items: Sequence[Any]
    origin: str
    results: list[ItemOutcome | None]
    rejections: list[RejectedRow] = field(default_factory=list)
    accepted: list[tuple[int, EventRecord]] = field(default_factory=list)  # first valid occurrence of each id
    repeats: list[tuple[int, EventRecord]] = field(default_factory=list)  # later occurrences in the batch
    first_seen: dict[str, int] = field(default_factory=dict)


@dataclass
class BatchOutcome:
    results: list[ItemOutcome]
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "results": [r.as_json() for r in self.results],
            "stored": self.stored,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
        }


def raw_json(item: Any) -> str:
    """The item as received, as JSON text for the dead letter (never fails, never holds NUL)."""
    try:
        text = orjson.dumps(item).decode()
    except (TypeError, orjson.JSONEncodeError):
        try:
            text = json.dumps(item, ensure_ascii=True, default=repr)
        except RecursionError:  # nested deeper than the recursive encoders go (JSON parsers allow ~1000)
            text = _deep_json(item)
    return text.replace("\x00", "\\u0000")


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


def _deep_json(value: Any) -> str:
    """JSON text of a value of any nesting depth, with an explicit stack instead of recursion."""
    out: list[str] = []
    pending: list[Any] = [value]
    while pending:
        top = pending.pop()
        if isinstance(top, _Text):
            out.append(top.text)
        elif isinstance(top, dict):
            parts: list[Any] = [_Text("{")]
            for i, (key, inner) in enumerate(top.items()):
                parts += [_Text(("," if i else "") + json.dumps(str(key)) + ":"), inner]
            pending.extend(reversed([*parts, _Text("}")]))
        elif isinstance(top, list):
            parts = [_Text("[")]
            for i, inner in enumerate(top):
                parts += [_Text(",")] if i else []
                parts.append(inner)
            pending.extend(reversed([*parts, _Text("]")]))
        else:
            out.append(json.dumps(top, ensure_ascii=True, default=repr))
    return "".join(out)


def _hint(item: Any, key: str) -> str | None:
    """A field of a rejected item, kept beside it for filtering the dead letter (if it is a string).

    A string with a lone surrogate (JSON allows ``"\\ud800"``) has no UTF-8 form: neither the
    database nor the JSON answer could hold it, so it gives no hint (the raw item keeps it, escaped).
    """
    if isinstance(item, dict):
        value = item.get(key)
        if isinstance(value, str):
            value = value[:255].replace("\x00", "")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return None
            return value
    return None


def _utcnow() -> datetime:
    return datetime.now(UTC)


def allow_all(_cloud: str) -> bool:
    return True


class Ingestor:
    """Validates and stores batches through one store. Cheap to share between threads."""

    def __init__(
        self,
        store: Store,
        registry: SizeSchemaRegistry,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ):
        self.store = store
        self.registry = registry
        self.clock = clock

    def ingest(
        self,
        items: Sequence[Any],
        *,
        origin: str,
        may_write: Callable[[str], bool] = allow_all,
        sources: tuple[str, ...] = ("collector",),
    ) -> BatchOutcome:
        """Validate and store one batch (at most 1000 items) in one transaction.

        ``origin`` says where the batch came from (``api``, ``file:NAME``, ``sync:CLOUD``) and is
        kept with dead-letter rows. ``may_write`` decides which clouds this writer may write;
        ``sources`` which ``source`` values it may claim (only reconciliation writes its own).
        """
        return self.commit(self.prepare(items, origin=origin, may_write=may_write, sources=sources))

    def prepare(
        self,
        items: Sequence[Any],
        *,
        origin: str,
        may_write: Callable[[str], bool] = allow_all,
        sources: tuple[str, ...] = ("collector",),
    ) -> PreparedBatch:
        """Validate a batch and find its in-batch repeats: CPU only, nothing touches the store."""
        if len(items) > MAX_BATCH:
            raise BatchTooLarge(len(items))
        batch = PreparedBatch(items, origin, [None] * len(items))
        first_seen = batch.first_seen
        for index, item in enumerate(items):
            checked = validate_event(item, self.registry)
            if not isinstance(checked, Rejection):
                if not may_write(checked.cloud):
                    checked = Rejection("forbidden_cloud",
                                        f"forbidden_cloud: cloud: this token may not write {checked.cloud!r}")
                elif checked.source not in sources:
                    checked = Rejection(
                        "forbidden_source",
                        f"forbidden_source: source: {checked.source!r} is written only by reconciliation",
                    )
            if isinstance(checked, Rejection):
                event_id = _hint(item, "event_id")
                cloud = _hint(item, "cloud")
                batch.results[index] = ItemOutcome(index, event_id, "rejected", cloud, checked.reason, checked.message)
                batch.rejections.append(RejectedRow(checked.reason, checked.message, origin, raw_json(item), cloud, event_id))
            elif checked.event_id in first_seen:
                batch.repeats.append((index, checked))
            else:
                first_seen[checked.event_id] = index
                batch.accepted.append((index, checked))
        return batch

    def commit(self, batch: PreparedBatch) -> BatchOutcome:
        """Store a prepared batch in one transaction and say what became of each item."""
        items, origin = batch.items, batch.origin
        accepted, repeats = batch.accepted, batch.repeats

        def work(uow: UnitOfWork) -> tuple[set[str], dict[str, str]]:
            received_at = self.clock()
            records = [record for _, record in accepted]
            inserted = uow.insert_events(records, received_at)
            held = {r.event_id for r in records if r.event_id not in inserted}
            winners = {r.event_id: r.content_hash for r in records if r.event_id in inserted}
            winners.update(uow.content_hashes(sorted(held)))
            conflicts = [
                RejectedRow(
                    "duplicate_conflict",
                    f"duplicate_conflict: event_id {r.event_id!r} is already stored with different content; "
                    "the first write wins",
                    origin,
                    raw_json(items[i]),
                    r.cloud,
                    r.event_id,
                )
                for i, r in (*accepted, *repeats)
                if winners.get(r.event_id, r.content_hash) != r.content_hash
            ]
            uow.insert_rejections([*batch.rejections, *conflicts], received_at)
            activity: dict[tuple[str, str], int] = {}
            for record in records:
                if record.event_id in inserted:
                    activity[(record.cloud, record.source)] = activity.get((record.cloud, record.source), 0) + 1
            uow.note_activity(activity, received_at)
            return inserted, winners

        inserted, winners = self.store.run(work)

        results = batch.results
        outcome = BatchOutcome(results=[], rejected=len(batch.rejections))
        for index, record in (*accepted, *repeats):
            if index == batch.first_seen[record.event_id] and record.event_id in inserted:
                results[index] = ItemOutcome(index, record.event_id, "stored", record.cloud)
                outcome.stored += 1
            else:
                conflict = winners.get(record.event_id, record.content_hash) != record.content_hash
                results[index] = ItemOutcome(index, record.event_id, "duplicate", record.cloud, conflict=conflict)
                outcome.duplicates += 1
        outcome.results = results  # type: ignore[assignment]  # every slot is filled by now
        return outcome

    def dead_letter(self, rows: Sequence[RejectedRow]) -> None:
        """Record things refused before they were items (a body that is not JSON, a bad file line)."""
        if rows:
            self.store.run(lambda uow: uow.insert_rejections(rows, self.clock()))

    def ingest_stream(
        self,
        items: Iterable[Any],
        *,
        origin: str,
        may_write: Callable[[str], bool] = allow_all,
        sources: tuple[str, ...] = ("collector",),
        batch_size: int = MAX_BATCH,
    ) -> Iterator[BatchOutcome]:
        """Ingest any number of items, one transaction per batch of ``batch_size``; yields each batch's outcome.

        Batches go one after the other: overlapping validation with the store in a second thread
        was measured slower here (the two fight over the GIL), so the simple loop stays.
        """
        batch: list[Any] = []
        for item in items:
            batch.append(item)
            if len(batch) >= batch_size:
                yield self.ingest(batch, origin=origin, may_write=may_write, sources=sources)
                batch = []
        if batch:
            yield self.ingest(batch, origin=origin, may_write=may_write, sources=sources)
