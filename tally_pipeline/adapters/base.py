"""The adapter protocol: enumerate a cloud's resources per type, and (optionally) what was deleted.

An adapter never decides anything: it reports what the platform says. Each resource type either
*enumerated* (a complete listing, possibly empty) or *failed* (with a reason). Reconciliation's
missed-delete pass runs only over types that enumerated, so a platform that stops answering reads
as "no information", never as "everything was deleted".
"""

from __future__ import annotations

from collections.abc import Iterator
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

    def enumerate(self, resource_type: str, *, at: datetime) -> Iterator[ListedResource]:
        """Stream every resource of one type, page by page. Raise (any exception) to fail the type.

        ``at`` is the run's instant; real platforms ignore it (they answer "now"), the simulator
        answers as of that instant.
        """
        ...

    def deleted_since(self, since: datetime, *, at: datetime) -> DeletedListing:
        """Resources deleted in ``[since, at]`` with real deletion times, or unavailable."""
        ...


def list_type(adapter: PlatformAdapter, resource_type: str, *, at: datetime) -> TypeListing:
    """Enumerate one type completely, turning any failure while iterating into ``Failed``.

    Listings are lazy (HTTP errors surface mid-iteration), so the whole iteration is guarded.
    """
    try:
        return Enumerated(resource_type, list(adapter.enumerate(resource_type, at=at)))
    except Exception as exc:  # noqa: BLE001 - any failure fails this type alone
        reason = f"{type(exc).__name__}: {exc}".strip()
        return Failed(resource_type, reason[:500])
