"""The ingest core: the only route into ``events``, shared by the API, landing files and reconciliation.

A batch of received items goes in; one outcome per item comes out, in order: ``stored``,
``duplicate`` (the cloud already holds the event_id; first write wins) or ``rejected`` (with a reason).
An event's identity is ``(cloud, event_id)``: the same id in two clouds is two events, so no writer
can shadow another cloud's events or learn which ids it holds.
The whole batch is one transaction: stored events and dead-letter rows commit together or not at all.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any, Literal

import orjson

from tally_pipeline.core.envelope import EVENT_ID_MAX, EventRecord, Rejection, is_cloud_name, validate_event
from tally_pipeline.core.errors import InputError
from tally_pipeline.core.jsontext import array_item_texts
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.store import type_activity
from tally_pipeline.store.base import EventKey, RejectedRow, Store, UnitOfWork

MAX_BATCH = 1000
# How many items of the next batch are validated while the database finishes a batch (it trails
# the writer by some milliseconds). Measured on Postgres: 200, 400 and 1000 all took 6-8 % off a
# stream's time against none; 400 leaves the next batch's copy validation to overlap with.
_AHEAD = 400
Status = Literal["stored", "duplicate", "rejected"]


class BatchTooLarge(InputError, ValueError):
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
        """The item's entry in an HTTP response (docs/api.md)."""
        out: dict[str, Any] = {"index": self.index, "event_id": self.event_id, "status": self.status}
        if self.reason is not None:
            out["reason"] = self.reason
            out["message"] = self.message
        if self.conflict:
            out["conflict"] = True
        return out


#: Validates one item for a writer: the envelope, then what this writer may write.
Check = Callable[[Any], EventRecord | Rejection]
#: The text of a batch's item ``index`` as received, for the dead letter.
RawOf = Callable[[int], str]


class PreparedBatch:
    """A batch on its way to the store: what each item is, before the store has a say.

    Items are validated in key order (cloud, event_id), on demand: ``new_records`` hands out each
    key's first valid occurrence while later items are still unchecked, so a store can write one event
    while the next is validated (Postgres: the server inserts rows while this process validates
    more). ``finish`` validates whatever is left; afterwards every list below is in item order.
    """

    def __init__(self, items: Sequence[Any], origin: str, check: Check, raw_of: RawOf | None = None):
        self.items = items
        self.origin = origin
        self.raw_of: RawOf = raw_of or (lambda index: raw_json(items[index]))
        self.results: list[ItemOutcome | None] = [None] * len(items)
        self.rejections: list[RejectedRow] = []
        self.accepted: list[tuple[int, EventRecord]] = []  # first valid occurrence of each key
        self.repeats: list[tuple[int, EventRecord]] = []  # later occurrences in the batch
        self.first_seen: dict[EventKey, int] = {}
        self._check = check
        self._order, self.candidate_keys = _key_order(items)
        self._next = 0  # how much of _order is validated
        self._new: list[EventRecord] = []  # accepted records, in key order
        self._rejected: list[tuple[int, RejectedRow]] = []

    def new_records(self) -> Iterator[EventRecord]:
        """The accepted records in key order, validating as they are asked for.

        Each call starts again from the first record (a store may iterate twice: a unit of work
        retried, a fallback after a failed copy); nothing is validated twice.
        """
        position = 0
        while True:
            while position < len(self._new):
                yield self._new[position]
                position += 1
            if self._next == len(self._order):
                return
            self._step()

    def validate_ahead(self, count: int) -> None:
        """Validate up to ``count`` more items (in key order) before any store asks for them."""
        end = min(self._next + count, len(self._order))
        while self._next < end:
            self._step()

    def finish(self) -> None:
        """Validate every remaining item and put the outcomes in item order."""
        while self._next < len(self._order):
            self._step()
        self._rejected.sort(key=_first)
        self.rejections = [row for _, row in self._rejected]
        self.accepted.sort(key=_first)
        self.repeats.sort(key=_first)

    def _step(self) -> None:
        index = self._order[self._next]
        self._next += 1
        item = self.items[index]
        checked = self._check(item)
        if isinstance(checked, Rejection):
            event_id = _hint(item, "event_id")
            cloud = _hint(item, "cloud")
            self.results[index] = ItemOutcome(index, event_id, "rejected", cloud, checked.reason, checked.message)
            self._rejected.append(
                (index, RejectedRow(checked.reason, checked.message, self.origin, self.raw_of(index), cloud, event_id))
            )
        elif (key := (checked.cloud, checked.event_id)) in self.first_seen:
            self.repeats.append((index, checked))  # equal keys go in item order: the first valid one wins
        else:
            self.first_seen[key] = index
            self.accepted.append((index, checked))
            self._new.append(checked)


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _key_order(items: Sequence[Any]) -> tuple[list[int], list[EventKey]]:
    """Item positions in key order (ties in item order), and the distinct keys worth looking up.

    The order is taken from the raw items, before validation: an accepted record keeps its item's
    cloud and event_id, and an item without string ones is never accepted, so those go last. The
    keys worth looking up are those a valid event could have (an id of 1 to EVENT_ID_MAX
    characters, no NUL, UTF-8; a cloud matching its pattern): the others could not even be sent to
    the database as a parameter.
    """
    keys: list[EventKey] = []
    positions: list[int] = []
    rest: list[int] = []
    for index, item in enumerate(items):
        if isinstance(item, dict):
            event_id = dict.get(item, "event_id")
            cloud = dict.get(item, "cloud")
            if isinstance(event_id, str) and isinstance(cloud, str):
                # a str subclass sorts as its str
                keys.append((cloud if type(cloud) is str else str.__str__(cloud),
                             event_id if type(event_id) is str else str.__str__(event_id)))
                positions.append(index)
                continue
        rest.append(index)
    by_key = sorted(range(len(keys)), key=keys.__getitem__)  # stable: equal keys keep item order
    order = [positions[k] for k in by_key]
    order += rest
    candidates: list[EventKey] = []
    previous = None
    for k in by_key:
        key = keys[k]
        if key != previous and _may_be_stored(key[1]) and is_cloud_name(key[0]):
            candidates.append(key)
        previous = key
    return order, candidates


def _may_be_stored(event_id: str) -> bool:
    if not 0 < len(event_id) <= EVENT_ID_MAX or "\x00" in event_id:
        return False
    if event_id.isascii():
        return True
    try:
        event_id.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


@dataclass
class BatchOutcome:
    results: list[ItemOutcome]
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    dead_letter_bytes: int = 0  # what this batch wrote to the dead letter (raw items and messages, UTF-8)

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


class BodyItemTexts:
    """Each item's text exactly as received in a body ``{"events": [...]}``, cut out of the body only
    when the dead letter first asks for one (a batch with nothing to dead-letter never pays)."""

    def __init__(self, body: bytes, items: Sequence[Any]):
        self._body = body
        self._items = items
        self._texts: list[str] | None = None
        self._cut = False

    def __call__(self, index: int) -> str:
        if not self._cut:
            self._cut = True
            texts = array_item_texts(self._body.decode("utf-8", errors="backslashreplace"))
            self._texts = texts if texts is not None and len(texts) == len(self._items) else None
        if self._texts is None:  # not expected once the body parsed; never lose the item
            return raw_json(self._items[index])
        return self._texts[index].replace("\x00", "\\u0000")


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


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="replace"))


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


@dataclass(frozen=True, slots=True)
class _Restartable:
    """An iterable that can be walked again: each ``iter`` calls the function anew."""

    start: Callable[[], Iterator[EventRecord]]

    def __iter__(self) -> Iterator[EventRecord]:
        return self.start()


@dataclass(slots=True)
class _ReadAhead:
    """A stream's next batch, read and partly validated while the database finishes the one before
    (called once per try of that batch's unit of work; the batch is read once)."""

    read: Callable[[], PreparedBatch | None]
    batch: PreparedBatch | None = None
    done: bool = False

    def __call__(self) -> None:
        if not self.done:
            self.batch, self.done = self.read(), True
        if self.batch is not None:
            self.batch.validate_ahead(_AHEAD)

    def take(self) -> PreparedBatch | None:
        return self.batch if self.done else self.read()


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
        raw_of: RawOf | None = None,
        keep: Callable[[RejectedRow], bool] | None = None,
    ) -> BatchOutcome:
        """Validate and store one batch (at most 1000 items) in one transaction.

        ``origin`` says where the batch came from (``api``, ``file:NAME``, ``sync:CLOUD``) and is
        kept with dead-letter rows. ``may_write`` decides which clouds this writer may write;
        ``sources`` which ``source`` values it may claim (only reconciliation writes its own).
        ``raw_of`` gives an item's text as received (default: the item written as JSON). ``keep`` decides
        which refused items get a dead-letter row (default: all); the outcome counts every one.
        """
        return self.commit(self._batch(items, origin, may_write, sources, raw_of), keep=keep)

    def prepare(
        self,
        items: Sequence[Any],
        *,
        origin: str,
        may_write: Callable[[str], bool] = allow_all,
        sources: tuple[str, ...] = ("collector",),
    ) -> PreparedBatch:
        """Validate a batch and find its in-batch repeats: CPU only, nothing touches the store."""
        batch = self._batch(items, origin, may_write, sources)
        batch.finish()
        return batch

    def _batch(
        self,
        items: Sequence[Any],
        origin: str,
        may_write: Callable[[str], bool],
        sources: tuple[str, ...],
        raw_of: RawOf | None = None,
    ) -> PreparedBatch:
        """A batch not validated yet: ``commit`` validates it while the store writes."""
        if len(items) > MAX_BATCH:
            raise BatchTooLarge(len(items))
        registry = self.registry

        def check(item: Any) -> EventRecord | Rejection:
            checked = validate_event(item, registry)
            if isinstance(checked, Rejection):
                return checked
            if not may_write(checked.cloud):
                return Rejection("forbidden_cloud", f"forbidden_cloud: cloud: this token may not write {checked.cloud!r}")
            if checked.source not in sources:
                return Rejection(
                    "forbidden_source",
                    f"forbidden_source: source: {checked.source!r} is written only by reconciliation",
                )
            return checked

        return PreparedBatch(items, origin, check, raw_of)

    def commit(self, batch: PreparedBatch, *, keep: Callable[[RejectedRow], bool] | None = None,
               meanwhile: Callable[[], None] | None = None) -> BatchOutcome:
        """Store a batch in one transaction and say what became of each item.

        A store that takes events as a stream gets them while the batch is still being validated,
        and runs ``meanwhile`` (the caller's CPU work: its next batch) while the database finishes
        this one; any other store gets the whole list, in item order, once validation is done.
        """
        origin = batch.origin
        streaming = self.store.streams_events
        if not streaming:
            batch.finish()  # validate before taking a connection, the store's lock or file

        dead_bytes = [0]

        def work(uow: UnitOfWork) -> tuple[set[EventKey], dict[EventKey, str]]:
            received_at = self.clock()
            if streaming:
                inserted = uow.insert_event_stream(batch.candidate_keys, _Restartable(batch.new_records), received_at,
                                                   meanwhile)
                batch.finish()
            else:
                inserted = uow.insert_events([record for _, record in batch.accepted], received_at)
            accepted, repeats = batch.accepted, batch.repeats
            if len(inserted) == len(accepted):  # every key was new (the usual batch): none to look for
                stored, held = [r for _, r in accepted], []
            else:
                stored = [r for _, r in accepted if (r.cloud, r.event_id) in inserted]
                held = sorted(k for _, r in accepted if (k := (r.cloud, r.event_id)) not in inserted)
            # The winner of a key (first write wins) is the stored row when the key was held already,
            # else the record just inserted; only the held ones need asking for, and the inserted
            # ones matter only to their repeats.
            winners = uow.content_hashes(held)
            if repeats:
                winners.update({k: r.content_hash for _, r in accepted if (k := (r.cloud, r.event_id)) in inserted})
            conflicts = [
                RejectedRow(
                    "duplicate_conflict",
                    f"duplicate_conflict: event_id {r.event_id!r} is already stored in cloud {r.cloud!r} with "
                    "different content; the first write wins",
                    origin,
                    batch.raw_of(i),
                    r.cloud,
                    r.event_id,
                    r.content_hash,
                )
                for i, r in ((*accepted, *repeats) if winners else ())
                if winners.get((r.cloud, r.event_id), r.content_hash) != r.content_hash
            ]
            dead = [*batch.rejections, *conflicts]
            if keep is not None:
                dead = [row for row in dead if keep(row)]
            uow.insert_rejections(dead, received_at)
            dead_bytes[0] = sum(_utf8_len(row.raw or "") + _utf8_len(row.message) for row in dead)
            with uow.pipelined():
                uow.note_activity(dict(Counter((r.cloud, r.source) for r in stored)), received_at)
                type_activity.note(uow, Counter((r.cloud, r.resource_type) for r in stored if r.source == "collector"),
                                   received_at)
            return inserted, winners

        inserted, winners = self.store.run(work)

        results = batch.results
        outcome = BatchOutcome(results=[], rejected=len(batch.rejections), dead_letter_bytes=dead_bytes[0])
        if not batch.repeats and len(inserted) == len(batch.accepted):  # each valid item stored: no key to weigh
            for index, record in batch.accepted:
                results[index] = ItemOutcome(index, record.event_id, "stored", record.cloud)
            outcome.stored = len(batch.accepted)
        else:
            for index, record in (*batch.accepted, *batch.repeats):
                key = (record.cloud, record.event_id)
                if index == batch.first_seen[key] and key in inserted:
                    results[index] = ItemOutcome(index, record.event_id, "stored", record.cloud)
                    outcome.stored += 1
                else:
                    conflict = winners.get(key, record.content_hash) != record.content_hash
                    results[index] = ItemOutcome(index, record.event_id, "duplicate", record.cloud,
                                                 conflict=conflict)
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

        Batches go one after the other, in one thread: overlapping validation with the store in a
        second thread was measured slower here (the two fight over the GIL). Validation and the
        database overlap within a batch, and while the database finishes a batch the next one is
        read from ``items`` and part of it validated (see ``commit``).
        """
        pending = iter(items)
        size = max(batch_size, 1)  # as before: a batch_size below 1 meant one item per batch

        def read() -> PreparedBatch | None:
            batch = list(islice(pending, size))
            return self._batch(batch, origin, may_write, sources) if batch else None

        current = read()
        while current is not None:
            ahead = _ReadAhead(read)
            yield self.commit(current, meanwhile=ahead)
            current = ahead.take()
