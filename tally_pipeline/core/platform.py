"""The platform's answers as values: what a listing, a confirmation or a deleted-since query returns.

Reconciliation's rules (core) decide on these; the adapters (I/O) produce them. They live in core so
the rules import nothing from the layer above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal


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
