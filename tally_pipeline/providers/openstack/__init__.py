"""OpenStack: its resource types, and what tally knows of each type's service.

The table below is the provider's entrance: a type OpenStack serves is one row here (beside its
size schema in ``tally_pipeline/schemas``, its record mapper in ``records.py`` and its notifications
in ``notifications.py``). The modules of this package read their per-type facts from it:

- ``adapter.py`` (openstacksdk), ``pages.py``, ``records.py``: listing a cloud and reading its records;
- ``scope.py``: which credentials may delete by absence; ``statuses.py``: the status vocabulary;
- ``clocks.py``: which instant each fact of a life takes; ``actions.py`` and ``dating.py``: nova's
  instance actions and how they date reconciliation's corrections;
- ``notifications.py`` (with ``nova_notifications.py`` and ``notification_fields.py``): the bus
  collector's mapping of notifications to events;
- ``usage.py`` and ``usage_audit.py``: the audit against nova's own usage; ``check.py``: the logic
  of ``tally openstack check``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where a type keeps nothing better than its request, billable life starts at its creation.
CREATED = "created_at"


@dataclass(frozen=True, slots=True)
class LifeClocks:
    """The platform instants a type's billable life starts and ends at."""

    #: The field that starts billable life (the service's own name for it, e.g. nova's
    #: ``launched_at``); ``created_at`` when the service keeps nothing better.
    starts_at: str = CREATED
    #: The fields that date a delete, first present wins; empty: the service keeps no deletion
    #: instant (the notification's timestamp, else the poll time).
    ends_at: tuple[str, ...] = ()
    #: Taken to the whole second on every path (the service writes it so in one of its formats).
    whole_seconds: bool = False


@dataclass(frozen=True, slots=True)
class OpenStackType:
    """One resource type as OpenStack serves it."""

    #: The project that lists it and publishes its notifications (nova, cinder, …).
    service: str
    #: Its service type in keystone's catalog, as reasons name it.
    catalog: str
    clocks: LifeClocks
    #: Statuses in which the service is still changing it (reconciliation defers a difference).
    transitional: frozenset[str]
    #: The roles the service's default policy lets list every project; None: the service refuses
    #: (403) an all-projects listing it does not allow, so any answer covers every project.
    all_projects_roles: frozenset[str] | None
    #: What the service answers a caller without those roles, for the reason of a refused type.
    narrows: str = ""


TYPES: dict[str, OpenStackType] = {
    "instance": OpenStackType(
        "nova", "compute",
        # nova's usage bills launched_at → terminated_at; ceilometer's and CloudKitty's instance
        # meters only count a server once nova reports it running, never while it is requested.
        LifeClocks("launched_at", ("terminated_at",), whole_seconds=True),
        # Not VERIFY_RESIZE: the server already runs (and is billed) on the new flavor, and with
        # nova's default resize_confirm_window = 0 it can wait there for days.
        frozenset({"build", "reboot", "hard_reboot", "rebuild", "migrating", "resize", "revert_resize",
                   "password", "deleting"}),
        None),
    "volume": OpenStackType(
        "cinder", "volumev3", LifeClocks(),
        frozenset({"creating", "attaching", "detaching", "deleting", "extending", "retyping", "downloading",
                   "uploading", "backing-up", "restoring-backup", "maintenance", "awaiting-transfer",
                   "reserved"}),
        frozenset({"admin"}), "cinder lists only the token's own project"),
    "floating_ip": OpenStackType(
        "neutron", "network", LifeClocks(), frozenset(),
        frozenset({"admin"}), "neutron lists only what the token's project may see"),
    "image": OpenStackType(
        # glance stamps deleted_at on the image it deletes
        "glance", "image", LifeClocks(ends_at=("deleted_at",)),
        frozenset({"queued", "saving", "uploading", "importing", "pending_delete"}),
        frozenset({"admin"}), "glance lists only the token's own, public, community and shared images"),
    "load_balancer": OpenStackType(
        "octavia", "load-balancer", LifeClocks(),
        frozenset({"pending_create", "pending_update", "pending_delete"}),
        frozenset({"admin", "load-balancer_admin", "load-balancer_global_observer"}),
        "octavia lists only the token's own project"),
}

#: The service that lists, and notifies about, each resource type.
SERVICE_OF_TYPE = {name: t.service for name, t in TYPES.items()}

#: Stored event types whose update changes the size (the others carry the size the resource had
#: before them too): nova's resize and its revert, cinder's extend and retype.
RESIZE_EVENT_TYPES = frozenset({"compute.instance.finish_resize.end", "compute.instance.resize.revert.end",
                                "volume.resize.end", "volume.retype"})

#: Where a silent service's notifications may have gone (``TallyServiceEventsSilent``'s message).
SILENT_SERVICE_HINT = ("cinder publishes on 'openstack' unless its control_exchange is set; "
                       "`tally openstack check CLOUD --collector URL` shows each service")
