"""What the real services say happened: the scenarios' operations through openstacksdk, and the platform's own
record of them (nova's server times and instance actions, its deleted listing and usage API), read back the
way an operator would check tally by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.realstack.product import epoch, wait_status

BUILD_WAIT = 300.0


def boot(conn: Any, name: str, image_id: str, flavor: str = "rs.tiny", *, wait: bool = True) -> Any:
    server = conn.compute.create_server(name=name, image_id=image_id, flavor_id=conn.compute.find_flavor(flavor).id,
                                        networks="none")
    return wait_status(lambda: conn.compute.get_server(server.id), "ACTIVE", BUILD_WAIT) if wait else server


def delete_server(conn: Any, server_id: str) -> None:
    conn.compute.delete_server(server_id)
    wait_until(lambda: conn.compute.find_server(server_id, all_projects=True) is None,
               f"server {server_id} deleted", BUILD_WAIT)


def delete_volume(conn: Any, volume_id: str) -> None:
    """Delete a volume and wait until cinder answers 404 for it (a fast delete may be done before the first look)."""
    conn.block_storage.delete_volume(volume_id)
    wait_until(lambda: conn.block_storage.find_volume(volume_id, ignore_missing=True, all_projects=True) is None,
               f"volume {volume_id} deleted", BUILD_WAIT)


@dataclass(frozen=True)
class ServerTimes:
    """A server's times as nova records them (seconds since the epoch)."""

    created: float
    launched: float | None
    terminated: float | None
    status: str


def server_times(conn: Any, server_id: str) -> ServerTimes | None:
    """As nova's API shows the server, live or from its deleted listing once it is gone (admin only); None when
    nova keeps no record of it (a build deleted before it was scheduled)."""
    params = {"all_tenants": "True", "uuid": server_id}
    found = conn.compute.get("/servers/detail", params=params).json()["servers"]
    if not found:
        found = conn.compute.get("/servers/detail", params={**params, "deleted": "True"}).json()["servers"]
    if not found:
        return None
    assert len(found) == 1, f"nova lists {len(found)} servers {server_id}"
    s = found[0]
    launched, terminated = s.get("OS-SRV-USG:launched_at"), s.get("OS-SRV-USG:terminated_at")
    return ServerTimes(epoch(s["created"]), epoch(launched) if launched else None,
                       epoch(terminated) if terminated else None, s["status"])


@dataclass(frozen=True)
class Action:
    """One instance action as nova records it: requested at ``start``, done by ``finish`` (its last event's);
    ``last_started`` is when its last event began (for a create: the build on the host, which the launch ends)."""

    name: str
    start: float
    finish: float | None
    last_started: float | None


def actions(conn: Any, server_id: str) -> dict[str, list[Action]]:
    """The server's instance actions by name (``create``, ``stop``, ``start``, ``resize``, …), oldest first."""
    found: dict[str, list[Action]] = {}
    for listed in conn.compute.server_actions(server_id):
        detail = conn.compute.get_server_action(listed.request_id, server_id)
        events = detail.events or ()
        finishes = [epoch(t) for e in events if (t := _field(e, "finish_time"))]
        starts = [epoch(t) for e in events if (t := _field(e, "start_time"))]
        found.setdefault(listed.action, []).append(Action(
            listed.action, epoch(listed.start_time), max(finishes) if finishes else None,
            max(starts) if starts else None))
    return {name: sorted(values, key=lambda a: a.start) for name, values in found.items()}


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def nova_usage_seconds(conn: Any, project_id: str, start: float, end: float) -> dict[str, float]:
    """Per server, the seconds nova's own usage API (``os-simple-tenant-usage``) accounts in [start, end)."""
    from datetime import UTC, datetime

    usage = conn.compute.get_usage(project_id, start=datetime.fromtimestamp(start, UTC).replace(tzinfo=None),
                                   end=datetime.fromtimestamp(end, UTC).replace(tzinfo=None))
    return {u["instance_id"]: float(u["hours"]) * 3600 for u in usage.server_usages or ()}
