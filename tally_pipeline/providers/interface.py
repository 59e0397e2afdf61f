"""The adapter protocol: enumerate a cloud's resources per type, and (optionally) what was deleted.

Besides ``PlatformAdapter``, reconciliation asks an adapter for these by name, when it has them:
``listing_scope(type)`` (whose resources a listing covers; ``list_type``), ``instance_actions`` with
its ``dating`` (the platform's record of what was done to a server, and the ``core.reconcile.Dating``
that reads it) and ``resize_event_types`` (the stored event types that change a resource's size).

An adapter never decides anything: it reports what the platform says. Each resource type either
*enumerated* (a complete listing, possibly empty) or *failed* (with a reason). Reconciliation's
missed-delete pass runs only over types that enumerated, so a platform that stops answering reads
as "no information", never as "everything was deleted".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from tally_pipeline.core.errors import PlatformError

# The platform's answers, re-exported: the adapters' vocabulary.
from tally_pipeline.core.platform import INSUFFICIENT_SCOPE as INSUFFICIENT_SCOPE
from tally_pipeline.core.platform import Confirmation as Confirmation
from tally_pipeline.core.platform import DeletedListing as DeletedListing
from tally_pipeline.core.platform import DeletedResource as DeletedResource
from tally_pipeline.core.platform import Enumerated as Enumerated
from tally_pipeline.core.platform import Failed as Failed
from tally_pipeline.core.platform import ListedResource as ListedResource
from tally_pipeline.core.platform import ListingScope as ListingScope
from tally_pipeline.core.platform import SkipItem as SkipItem
from tally_pipeline.core.platform import SkippedResource as SkippedResource
from tally_pipeline.core.platform import TypeListing as TypeListing

#: A failed type's code when the run's time bound ended its listing.
RUN_TIME_BOUND = "run_time_bound"


class AdapterError(PlatformError, RuntimeError):
    """A failure listing one type; the message becomes that type's ``failed(reason)``."""

    #: A code for rules and alerts (``Failed.code``); None for an ordinary failure.
    code: str | None = None


class InsufficientScope(AdapterError):
    """The credentials cannot list every project of the type (the service refused, or would narrow)."""

    code = INSUFFICIENT_SCOPE


class MarkerVanished(AdapterError):
    """The resource a listing's paging marker named was gone by the next page: start the listing over."""


@runtime_checkable
class PlatformAdapter(Protocol):
    """What reconciliation needs from a platform."""

    #: The resource types this adapter can list (a subset of the registry's).
    resource_types: tuple[str, ...]

    def enumerate(self, resource_type: str, *, at: datetime) -> Iterator[ListedResource | SkippedResource]:
        """Stream every resource of one type, page by page. Raise (any exception) to fail the type.

        An item that is listed but unreadable is yielded as a ``SkippedResource`` instead.

        ``at`` is the run's instant; real platforms ignore it (they answer "now"), the simulator
        answers as of that instant.
        """
        ...

    def deleted_since(self, since: datetime, *, at: datetime) -> DeletedListing:
        """Resources deleted in ``[since, at]`` with real deletion times, or unavailable."""
        ...

    def confirm_gone(self, resource_type: str, resource_ids: Sequence[str], *, at: datetime,
                     deadline: float | None = None) -> dict[str, Confirmation]:
        """Ask the platform, by id, about resources missing from a listing; one answer per id.

        A listing may silently leave live items out (nova skips the servers of a down cell from any
        paged listing), so a delete by absence is booked only on a ``gone`` answer. ``deadline``
        (``time.monotonic()``) is the run's time bound: no question is started after it.
        """
        ...


def list_type(adapter: PlatformAdapter, resource_type: str, *, at: datetime,
              deadline: float | None = None) -> TypeListing:
    """Enumerate one type completely, turning any failure while iterating into ``Failed``.

    Listings are lazy (HTTP errors surface mid-iteration), so the whole iteration is guarded.
    An adapter that can say whose resources it lists (``listing_scope``) lists a type only when the
    listing covers every project; otherwise the type fails with code ``insufficient_scope`` and is
    never read. A listing whose paging marker vanished between two pages starts over once. Past
    ``deadline`` (``time.monotonic()``; the run's time bound) the listing stops and the type fails.
    """
    scope_of = getattr(adapter, "listing_scope", None)
    own_project = None
    if scope_of is not None:
        try:
            scope: ListingScope = scope_of(resource_type)
        except Exception as exc:  # noqa: BLE001 - no proof of scope is no listing
            return _failed(resource_type, exc)
        if not scope.all_projects:
            return Failed(resource_type, scope.detail[:500], code=INSUFFICIENT_SCOPE)
        own_project = scope.own_project
    restarts = 0
    while True:
        items: list[ListedResource] = []
        skipped: list[SkippedResource] = []
        try:
            for n, item in enumerate(adapter.enumerate(resource_type, at=at)):
                if isinstance(item, SkippedResource):
                    skipped.append(item)
                else:
                    items.append(item)
                if deadline is not None and n % 100 == 0 and time.monotonic() > deadline:
                    return Failed(resource_type, f"{RUN_TIME_BOUND}: the run's time bound was reached after "
                                                 f"{n + 1} items", code=RUN_TIME_BOUND)
            return Enumerated(resource_type, items, skipped=skipped, own_project=own_project, restarts=restarts)
        except MarkerVanished as exc:
            if restarts >= 1:
                return _failed(resource_type, exc, prefix="after one restart: ")
            restarts += 1  # what was read is dropped: the listing starts over from its first page
        except Exception as exc:  # noqa: BLE001 - any failure fails this type alone
            return _failed(resource_type, exc)


def _failed(resource_type: str, exc: BaseException, *, prefix: str = "") -> Failed:
    code = getattr(exc, "code", None)
    reason = prefix + (str(exc) if code else f"{type(exc).__name__}: {exc}")
    return Failed(resource_type, reason.strip()[:500], code=code)


def confirm_each(resource_ids: Sequence[str], ask: Callable[[str], Confirmation], *,
                 concurrency: int, deadline: float | None = None) -> dict[str, Confirmation]:
    """Ask about each id with at most ``concurrency`` requests in flight; a question that raises
    is an unconfirmed answer carrying the error, never a deletion. No question starts after
    ``deadline`` (``time.monotonic()``): those ids stay unconfirmed."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rid: str) -> Confirmation:
        if deadline is not None and time.monotonic() > deadline:
            return Confirmation(rid, False, "not asked: the run's time bound was reached")
        try:
            return ask(rid)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the resource unconfirmed
            return Confirmation(rid, False, f"{type(exc).__name__}: {exc}"[:300])

    if len(resource_ids) <= 1 or concurrency <= 1:
        return {rid: one(rid) for rid in resource_ids}
    with ThreadPoolExecutor(max_workers=min(concurrency, len(resource_ids)), thread_name_prefix="confirm") as pool:
        return dict(zip(resource_ids, pool.map(one, resource_ids)))
