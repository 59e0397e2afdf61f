"""Which platform statuses mean "in transition": a change the platform is still making.

Reconciliation defers any difference on such a resource (its notification may still be on the
way). The sets (``TYPES``) follow each OpenStack service's own status vocabulary; the simulator
speaks the same vocabulary, so both adapters share these rules. Matching is case-insensitive.
"""

from __future__ import annotations

from tally_pipeline.providers.openstack import TYPES


def in_transition(resource_type: str, status: str | None, task_state: str | None = None) -> bool:
    """True when the platform is still changing the resource.

    Nova shows a server being deleted as ACTIVE with task_state ``deleting``, so for instances any
    non-empty task_state counts as a transition too. Unknown types have no transitional statuses.
    """
    if resource_type == "instance" and task_state:
        return True
    if not status:
        return False
    known = TYPES.get(resource_type)
    return known is not None and status.lower() in known.transitional


#: Server statuses in which a missing launch time means the build never ran (failed, or still building).
_UNLAUNCHED = frozenset({"error", "build"})
#: Octavia states of a load balancer with no sign it ever served: still being created, or ERROR,
#: which octavia shows alike for a failed create and a failed update.
_NEVER_ACTIVE = frozenset({"pending_create", "error"})


def never_ran(resource_type: str, status: str | None, *, launched: bool | None = None) -> str | None:
    """Why the platform shows a resource never ran, or None.

    ``launched`` is nova's evidence (``OS-SRV-USG:launched_at`` set or null; None when unknown):
    a server in ERROR or BUILD that never launched is a failed (or unfinished) build. A load
    balancer never active is one octavia still creates, or one in ERROR.
    """
    state = (status or "").lower()
    if resource_type == "instance" and launched is False and state in _UNLAUNCHED:
        return "never_launched"
    if resource_type == "load_balancer" and state in _NEVER_ACTIVE:
        return "never_active"
    return None
