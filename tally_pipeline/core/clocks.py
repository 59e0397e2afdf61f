"""Which of the platform's instants each fact of a resource's life takes: one clock per fact, per type.

Billable life starts when the platform starts accounting for the resource and ends when it stops,
whichever path (a notification, a listing) tells us. For a nova server that is ``launched_at`` to
``terminated_at``, the interval nova's own usage API (``os-simple-tenant-usage``) bills and its
notifications and listings both carry; the time between the API request (``created_at``) and the
launch (image download, scheduling) is kept in the history as a note and billed by no meter. A type
whose platform keeps nothing better starts at ``created_at``; where the platform keeps no deletion
instant at all, a delete is dated at the notification's timestamp, or at the poll time when
reconciliation finds the resource gone.

Nova writes its instants with microseconds in its listings and legacy notifications, and to the
second in its versioned notifications: its instants are taken to the whole second on every path,
so one fact lands at one instant whichever path saw it (docs/openstack.md, «Which clock each fact
takes»).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LifeClocks:
    """The platform instants a type's billable life starts and ends at."""

    #: The field that starts billable life (the platform's own name for it, e.g. nova's
    #: ``launched_at``); ``created_at`` when the platform keeps nothing better.
    starts_at: str
    #: The fields that date a delete, first present wins; empty: the platform keeps no deletion
    #: instant (the notification's timestamp, else the poll time).
    ends_at: tuple[str, ...]
    #: Taken to the whole second on every path (the platform writes it so in one of its formats).
    whole_seconds: bool = False


CREATED = "created_at"

CLOCKS: dict[str, LifeClocks] = {
    # nova's usage bills launched_at → terminated_at; ceilometer's and CloudKitty's instance meters
    # only count a server once nova reports it running, never while it is requested or scheduled.
    "instance": LifeClocks("launched_at", ("terminated_at",), whole_seconds=True),
    # cinder, neutron and octavia keep a creation instant and no deletion instant.
    "volume": LifeClocks(CREATED, ()),
    "floating_ip": LifeClocks(CREATED, ()),
    "load_balancer": LifeClocks(CREATED, ()),
    # glance stamps deleted_at on the image it deletes.
    "image": LifeClocks(CREATED, ("deleted_at",)),
}
_DEFAULT = LifeClocks(CREATED, ())


def clocks_of(resource_type: str) -> LifeClocks:
    """The type's clocks; a type registered from a directory without one starts at ``created_at``."""
    return CLOCKS.get(resource_type, _DEFAULT)


def on_clock(resource_type: str, at: datetime) -> datetime:
    """An instant of the platform's as every path dates it (nova's: to the whole second). The edges
    that read a platform's records (the collector's mapping, the adapters) apply it."""
    return at.replace(microsecond=0) if clocks_of(resource_type).whole_seconds else at


def life_start(resource_type: str, created_at: datetime, started_at: datetime | None) -> datetime:
    """Where billable life starts: the type's own start instant (``started_at``, e.g. nova's
    ``launched_at``) when the platform gave it, else ``created_at``.

    A start before the creation (clock skew between services) is taken as the creation: life never
    starts before the request.
    """
    if clocks_of(resource_type).starts_at == CREATED or started_at is None:
        return created_at
    return max(started_at, created_at)
