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
takes»). Where billable life starts is ``core.platform.life_start``, from the ``started_at`` the
adapter gives for a type that starts at an instant of its own.
"""

from __future__ import annotations

from datetime import datetime

from tally_pipeline.providers.openstack import TYPES, LifeClocks

_DEFAULT = LifeClocks()


def clocks_of(resource_type: str) -> LifeClocks:
    """The type's clocks; a type registered from a directory without one starts at ``created_at``."""
    known = TYPES.get(resource_type)
    return known.clocks if known is not None else _DEFAULT


def on_clock(resource_type: str, at: datetime) -> datetime:
    """An instant of the platform's as every path dates it (nova's: to the whole second). The edges
    that read a platform's records (the collector's mapping, the adapters) apply it."""
    return at.replace(microsecond=0) if clocks_of(resource_type).whole_seconds else at
