"""The platform's answers as values: what a listing, a confirmation or a deleted-since query returns.

Reconciliation's rules (core) decide on these; the adapters (I/O) produce them. They live in core so
the rules import nothing from the layer above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tally_pipeline.core.errors import PlatformError

#: What dated a correction the platform's own record was asked about: an action the platform
#: recorded, its ``updated`` instant, else the poll.
DatedBy = Literal["action", "updated", "poll"]
DATED_BY: tuple[DatedBy, ...] = ("action", "updated", "poll")


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
    #: Listed as present but without its details (a placeholder the platform shows for a resource
    #: in a part of it that does not answer): never updated, created or deleted on the strength of
    #: this record.
    unknown: bool = False
    #: Why the platform shows this resource never ran, if it does (e.g. ``never_launched``: a server
    #: whose build never started it; ``never_active``: a resource never in service). Reconciliation
    #: never opens a lifecycle for it; one already known keeps going.
    never_ran: str | None = None
    #: Where the platform starts accounting for it, when the type keeps an instant of its own for
    #: that (a server's launch): billable life starts there (``life_start``), not at ``created_at``,
    #: the API request. Adapters give it only for types whose life starts at such an instant.
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SkippedResource:
    """A resource the platform lists but whose record cannot be read (e.g. an image without owner).

    It is present, so it is never deleted by absence; it is counted per type by ``reason``.
    """

    resource_type: str
    resource_id: str
    reason: str  # a short code: no_project, no_created_at, ...
    detail: str


class SkipItem(PlatformError, ValueError):
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
    """A resource the platform reports deleted, with its real deletion time (e.g. a compute service that keeps its deleted servers listable)."""

    resource_type: str
    resource_id: str
    project_id: str
    size: dict[str, Any]
    created_at: datetime
    deleted_at: datetime
    #: As ``ListedResource.never_ran``: a server deleted without ever launching (a failed build) is
    #: never recovered.
    never_ran: str | None = None
    #: As ``ListedResource.started_at`` (a deleted server keeps its launch).
    started_at: datetime | None = None
    #: The status the listing shows for the server's life, lower-cased, or None when it shows only
    #: the deletion itself (``DELETED``, vm_state ``deleted``): then a recovered lifecycle's status is
    #: unknowable (``UNKNOWN_STATUS``).
    status: str | None = None


@dataclass(frozen=True, slots=True)
class ListingScope:
    """Whether the credentials' listing of one type covers every project, and why (or why not).

    ``own_project`` is the project the credentials belong to, when they belong to one: a listing
    holding nothing but that project's resources while the projection holds other projects' is
    taken as narrowed, whatever the proof said.
    """

    all_projects: bool
    detail: str
    own_project: str | None = None


#: The status of an interval whose platform status is unknowable (a lifecycle recovered from a
#: deleted listing that shows only the deletion): billed unless a meter lists it in its
#: ``unbilled_statuses``, and counted wherever it is billed (docs/ledger.md).
UNKNOWN_STATUS = "unknown"

#: A failed type's code when the credentials cannot see every project (nothing is deleted).
INSUFFICIENT_SCOPE = "insufficient_scope"


@dataclass(frozen=True)
class Enumerated:
    """A type listed completely. ``items`` may be empty: a type that holds nothing still enumerated."""

    resource_type: str
    items: list[ListedResource]
    status: Literal["enumerated"] = "enumerated"
    skipped: list[SkippedResource] = field(default_factory=list)
    #: The credentials' own project, when the listing's scope was proven (see ``ListingScope``).
    own_project: str | None = None
    #: How often the listing started over because its paging marker vanished between two pages.
    restarts: int = 0


@dataclass(frozen=True)
class Failed:
    """A type that could not be listed (error, timeout, bad page, service missing, too narrow a scope).

    ``code`` classifies the failure where a rule or an alert needs it (``insufficient_scope``,
    ``run_time_bound``); ``reason`` says it for a person.
    """

    resource_type: str
    reason: str
    status: Literal["failed"] = "failed"
    code: str | None = None


TypeListing = Enumerated | Failed


@dataclass(frozen=True)
class DeletedListing:
    """The answer to "what was deleted since T": available with items, or unavailable with a reason."""

    available: bool
    items: list[DeletedResource] = field(default_factory=list)
    reason: str | None = None


def life_start(created_at: datetime, started_at: datetime | None) -> datetime:
    """Where billable life starts: the resource's own start instant (``ListedResource.started_at``)
    when the platform gave one, else ``created_at``.

    A start before the creation (clock skew between services) is taken as the creation: life never
    starts before the request.
    """
    return created_at if started_at is None else max(started_at, created_at)
