"""Checkpoint-delta arithmetic: what one cycle posts for one entity, and where the checkpoint moves.

An entity is (cloud, project_id, meter). A cycle at ``now`` looks at usage through the clamp
``now − ingest_lag``; it posts ``total − checkpoint.total`` and advances the checkpoint. The part of
that delta dated before the aged-out boundary goes to the ``aged_out`` account, the rest to
``usage``. All amounts are integer micro-units (see ``core.usage``). docs/ledger.md explains why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.fold import Interval as FoldedInterval
from tally_pipeline.core.registry import Meter
from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.core.usage import Interval, usage_by_entity

Account = Literal["usage", "aged_out"]
USAGE: Account = "usage"
AGED_OUT: Account = "aged_out"
ACCOUNTS: tuple[Account, ...] = (USAGE, AGED_OUT)


class EntityKey(NamedTuple):
    """What a checkpoint and its postings belong to. A tuple: hashed and compared in C, since a
    cycle looks entities up by the hundred thousand; ordered like the tables' primary keys."""

    cloud: str
    project_id: str
    meter: str

    def __str__(self) -> str:
        return f"{self.cloud}/{self.project_id}/{self.meter}"


class NonMonotonicCheckpoint(InputError, ValueError):
    """A cycle's clamp is earlier than a checkpoint's: posting would move the checkpoint backwards."""

    def __init__(self, clamp: datetime, checkpoint_clamp: datetime, entity: EntityKey | None = None):
        where = f"entity {entity}: " if entity is not None else ""
        super().__init__(
            f"{where}clamp {format_rfc3339(clamp)} is earlier than the checkpoint at "
            f"{format_rfc3339(checkpoint_clamp)}; a checkpoint never moves backwards"
        )
        self.clamp = clamp
        self.checkpoint_clamp = checkpoint_clamp
        self.entity = entity


@dataclass(frozen=True, slots=True)
class CycleWindow:
    """The instants one cycle works with, all derived from ``now``."""

    now: datetime
    clamp: datetime  # now − ingest_lag: usage is counted through here
    window_start: datetime  # now − window_days: usage dated earlier is "aged out"
    boundary: datetime  # min(window_start, clamp): the aged-out cut this cycle records

    @classmethod
    def at(cls, now: datetime, *, ingest_lag: timedelta | float, window_days: int) -> CycleWindow:
        now = to_utc(now)
        lag = ingest_lag if isinstance(ingest_lag, timedelta) else timedelta(seconds=ingest_lag)
        if lag < timedelta(0):
            raise ValueError("ingest_lag must not be negative")
        if window_days < 1:
            raise ValueError("window_days must be at least 1")
        clamp = now - lag
        window_start = now - timedelta(days=window_days)
        return cls(now, clamp, window_start, min(window_start, clamp))


# Checkpoint, EntityTotals and Delta are NamedTuples, not frozen dataclasses: a cycle makes one of
# each per entity, and a frozen dataclass's __init__ costs several times a tuple's.


class Checkpoint(NamedTuple):
    """How far an entity has been posted.

    ``total`` is the usage through ``clamp`` as posted (the sum of the entity's postings);
    ``aged_before`` is the part of it dated before ``boundary``, as seen when it was posted;
    ``watermark`` is the projection watermark that history was read at (None: not recorded).
    A checkpoint with ``clamp`` None has never been posted.
    """

    total: int = 0
    clamp: datetime | None = None
    boundary: datetime | None = None
    aged_before: int = 0
    watermark: int | None = None


class EntityTotals(NamedTuple):
    """Cumulative usage of an entity's intervals, as of now, through three instants."""

    through_clamp: int  # U(window.clamp)
    through_checkpoint_boundary: int  # U(split_boundary(checkpoint, window))
    through_boundary: int  # U(window.boundary)


class Delta(NamedTuple):
    """What to post for one entity in one cycle, and the checkpoint that results."""

    usage: int
    aged_out: int
    checkpoint: Checkpoint

    @property
    def total(self) -> int:
        return self.usage + self.aged_out

    def amounts(self) -> list[tuple[Account, int]]:
        """The non-zero postings, by account (a zero is never posted)."""
        out: list[tuple[Account, int]] = []
        if self.usage:
            out.append((USAGE, self.usage))
        if self.aged_out:
            out.append((AGED_OUT, self.aged_out))
        return out


@dataclass(frozen=True, slots=True)
class PostingKey:
    """The natural key of a posting: one per entity, clamp and account, so a re-run posts nothing new."""

    entity: EntityKey
    clamp: datetime
    account: Account

    def __str__(self) -> str:
        return f"{self.entity}@{format_rfc3339(self.clamp)}#{self.account}"


def split_boundary(checkpoint: Checkpoint, window: CycleWindow) -> datetime:
    """The cut that splits this cycle's delta: the checkpoint's own boundary (this cycle's if none).

    The checkpoint recorded how much of its total was dated before its boundary, so only at that
    boundary can "already posted" and "seen now" be compared exactly.
    """
    return checkpoint.boundary if checkpoint.boundary is not None else window.boundary


def aged_part(checkpoint: Checkpoint, totals: EntityTotals, window: CycleWindow, late: int = 0) -> int:
    """The part of this cycle's delta dated before this cycle's boundary.

    A checkpoint posted at a clamp no later than this boundary (the poster was paused for longer
    than the window) is dated wholly before it: everything posted is there, so the split is exact
    at this cycle's own boundary, ``U(B) − total``. Otherwise the checkpoint knows exactly how much
    of its total was dated before its own boundary, so the change dated before that boundary is
    ``U(checkpoint.boundary) − aged_before``; ``late`` adds the change dated between the two
    boundaries, which only the events folded since the checkpoint can tell (``late_span``).
    """
    if checkpoint.clamp is not None and checkpoint.clamp <= window.boundary:
        return totals.through_boundary - checkpoint.total
    return totals.through_checkpoint_boundary - checkpoint.aged_before + late


def late_span(checkpoint: Checkpoint, window: CycleWindow, watermark: int) -> tuple[int, datetime] | None:
    """``(since, start)`` when this cycle's split needs the change dated in ``[start, window.boundary)``
    made by the events folded after seq ``since``; None when it does not.

    Needed when the checkpoint was posted inside this window (its clamp is past this boundary) with
    an earlier boundary, and events were folded since its watermark: what it posted in that band is
    the usage as of its watermark, which the current history no longer shows. A checkpoint with no
    recorded watermark (posted before it was kept) cannot tell: the band counts as ``usage``.
    """
    if (
        checkpoint.clamp is None
        or checkpoint.clamp <= window.boundary
        or checkpoint.boundary is None
        or checkpoint.boundary >= window.boundary
        or checkpoint.watermark is None
        or checkpoint.watermark >= watermark
    ):
        return None
    return checkpoint.watermark, checkpoint.boundary


def usage_moved(
    meters: Iterable[Meter],
    cloud: str,
    resource_type: str,
    now: Iterable[FoldedInterval],
    then: Iterable[FoldedInterval],
    start: datetime,
    end: datetime,
) -> dict[EntityKey, int]:
    """How much usage dated in ``[start, end)`` one resource's intervals gained from ``then`` to
    ``now``, per entity (an interval's project is its entity's), with the ledger's per-interval
    rule. An interval the meters cannot read counts nothing, as in the totals, which report it.
    """
    def by_entity(intervals: Iterable[FoldedInterval]) -> dict[tuple[str, str, str], int]:
        rows = [(cloud, iv.project_id, resource_type,
                 Interval(iv.start, iv.end, iv.size, platform_status=iv.platform_status)) for iv in intervals]
        return usage_by_entity(meters, rows, start, end, skip_unreadable=True)

    gained, lost = by_entity(now), by_entity(then)
    moved = {EntityKey(*key): gained.get(key, 0) - lost.get(key, 0) for key in gained.keys() | lost.keys()}
    return {key: micro for key, micro in moved.items() if micro}


def needs_posting(checkpoint_clamp: datetime | None, window: CycleWindow, entity: EntityKey | None = None) -> bool:
    """False when a checkpoint at ``checkpoint_clamp`` is already at this cycle's clamp; raises
    ``NonMonotonicCheckpoint`` when it is past it."""
    if checkpoint_clamp is None or checkpoint_clamp < window.clamp:
        return True
    if checkpoint_clamp == window.clamp:
        return False
    raise NonMonotonicCheckpoint(window.clamp, checkpoint_clamp, entity)


def plan_delta(
    checkpoint: Checkpoint,
    totals: EntityTotals,
    window: CycleWindow,
    entity: EntityKey | None = None,
    *,
    late: int = 0,
    watermark: int | None = None,
) -> Delta | None:
    """The delta one cycle posts for one entity, or None when its checkpoint is already at the clamp.

    ``aged_out`` is the part of ``totals.through_clamp − checkpoint.total`` dated before this
    cycle's boundary (``aged_part``, with ``late`` from ``late_span``); ``usage`` is the rest.
    Either may be negative (history was corrected). The new checkpoint records this cycle's
    boundary, the usage dated before it and the projection ``watermark`` the totals were read at,
    so the next cycle can split its own delta the same way.
    """
    if not needs_posting(checkpoint.clamp, window, entity):
        return None
    delta = totals.through_clamp - checkpoint.total
    aged_out = aged_part(checkpoint, totals, window, late)
    advanced = Checkpoint(
        total=totals.through_clamp,
        clamp=window.clamp,
        boundary=window.boundary,
        aged_before=totals.through_boundary,
        watermark=watermark,
    )
    return Delta(usage=delta - aged_out, aged_out=aged_out, checkpoint=advanced)


def posting_keys(entity: EntityKey, delta: Delta, clamp: datetime) -> list[tuple[PostingKey, int]]:
    return [(PostingKey(entity, clamp, account), amount) for account, amount in delta.amounts()]
