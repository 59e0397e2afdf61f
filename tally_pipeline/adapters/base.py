"""The adapter protocol: enumerate a cloud's resources per type, and (optionally) what was deleted.

An adapter never decides anything: it reports what the platform says. Each resource type either
*enumerated* (a complete listing, possibly empty) or *failed* (with a reason). Reconciliation's
missed-delete pass runs only over types that enumerated, so a platform that stops answering reads
as "no information", never as "everything was deleted".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable


from tally_pipeline.core.platform import (  # noqa: F401  (re-exported: the adapters' vocabulary)
    Confirmation,
    DeletedListing,
    DeletedResource,
    Enumerated,
    Failed,
    ListedResource,
    SkipItem,
    SkippedResource,
    TypeListing,
)


class AdapterError(RuntimeError):
    """A failure listing one type; the message becomes that type's ``failed(reason)``."""


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

    def confirm_gone(self, resource_type: str, resource_ids: Sequence[str], *, at: datetime) -> dict[str, Confirmation]:
        """Ask the platform, by id, about resources missing from a listing; one answer per id.

        A listing may silently leave live items out (nova skips the servers of a down cell from any
        paged listing), so a delete by absence is booked only on a ``gone`` answer.
        """
        ...


def list_type(adapter: PlatformAdapter, resource_type: str, *, at: datetime) -> TypeListing:
    """Enumerate one type completely, turning any failure while iterating into ``Failed``.

    Listings are lazy (HTTP errors surface mid-iteration), so the whole iteration is guarded.
    """
    items: list[ListedResource] = []
    skipped: list[SkippedResource] = []
    try:
        for item in adapter.enumerate(resource_type, at=at):
            (skipped if isinstance(item, SkippedResource) else items).append(item)
        return Enumerated(resource_type, items, skipped=skipped)
    except Exception as exc:  # noqa: BLE001 - any failure fails this type alone
        reason = f"{type(exc).__name__}: {exc}".strip()
        return Failed(resource_type, reason[:500])


def confirm_each(resource_ids: Sequence[str], ask: Callable[[str], Confirmation], *,
                 concurrency: int) -> dict[str, Confirmation]:
    """Ask about each id with at most ``concurrency`` requests in flight; a question that raises
    is an unconfirmed answer carrying the error, never a deletion."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rid: str) -> Confirmation:
        try:
            return ask(rid)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the resource unconfirmed
            return Confirmation(rid, False, f"{type(exc).__name__}: {exc}"[:300])

    if len(resource_ids) <= 1 or concurrency <= 1:
        return {rid: one(rid) for rid in resource_ids}
    with ThreadPoolExecutor(max_workers=min(concurrency, len(resource_ids)), thread_name_prefix="confirm") as pool:
        return dict(zip(resource_ids, pool.map(one, resource_ids)))
