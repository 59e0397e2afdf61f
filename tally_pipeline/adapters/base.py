"""The adapter protocol: enumerate a cloud's resources per type, and (optionally) what was deleted.

An adapter never decides anything: it reports what the platform says. Each resource type either
*enumerated* (a complete listing, possibly empty) or *failed* (with a reason). Reconciliation's
missed-delete pass runs only over types that enumerated, so a platform that stops answering reads
as "no information", never as "everything was deleted".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ListedResource:
    """One resource as the platform lists it, already mapped to our type and size schema."""

    resource_type: str
    resource_id: str
    project_id: str
    size: dict[str, Any]
    status: str
    in_transition: bool
    created_at: datetime
    updated_at: datetime | None = None
    #: Listed as present but without its details (nova's ``UNKNOWN`` placeholder for a server in an
    #: unreachable cell): never updated, created or deleted on the strength of this record.
    unknown: bool = False


@dataclass(frozen=True, slots=True)
class SkippedResource:
    """A resource the platform lists but whose record cannot be read (e.g. an image without owner).

    It is present, so it is never deleted by absence; it is counted per type by ``reason``.
    """

    resource_type: str
    resource_id: str
    reason: str  # a short code: no_project, no_created_at, ...
    detail: str


class SkipItem(ValueError):
    """Raised by a record mapper: this one item is unreadable, the rest of its type lists on."""

    def __init__(self, resource_type: str, resource_id: str, reason: str, detail: str):
        super().__init__(detail)
        self.item = SkippedResource(resource_type, resource_id, reason, detail)


@dataclass(frozen=True, slots=True)
class Confirmation:
    """The platform's answer, asked by id, for a resource missing from its listing.

    ``gone`` only on a definite answer (404, or a record the platform shows as deleted, then
    ``deleted_at`` when it dates it); anything else (still answering, ``UNKNOWN``, an error, a
    timeout) leaves it unconfirmed with ``detail`` saying why.
    """

    resource_id: str
    gone: bool
    detail: str
    deleted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DeletedResource:
    """A resource the platform reports deleted, with its real deletion time (nova's deleted servers)."""

    resource_type: str
    resource_id: str
    project_id: str
    size: dict[str, Any]
    created_at: datetime
    deleted_at: datetime


@dataclass(frozen=True)
class Enumerated:
    """A type listed completely. ``items`` may be empty: a type that holds nothing still enumerated."""

    resource_type: str
    items: list[ListedResource]
    status: Literal["enumerated"] = "enumerated"
    skipped: list[SkippedResource] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    """A type that could not be listed (error, timeout, bad page, service missing)."""

    resource_type: str
    reason: str
    status: Literal["failed"] = "failed"


TypeListing = Enumerated | Failed


@dataclass(frozen=True)
class DeletedListing:
    """The answer to "what was deleted since T": available with items, or unavailable with a reason."""

    available: bool
    items: list[DeletedResource] = field(default_factory=list)
    reason: str | None = None


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
