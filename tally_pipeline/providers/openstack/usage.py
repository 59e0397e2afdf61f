"""Nova's own accounting of a window: ``GET /os-simple-tenant-usage`` for every project, detailed, paged.

Nova pages this API by **server** from microversion 2.40 (``limit`` servers a page after ``marker``,
a server uuid, with a next link in ``tenant_usages_links`` while a page is full); one project's
servers may run over several pages, so the pages' ``tenant_usages`` are merged per project. We ask
for the same microversion as the server listing (2.47 or later, so paging is always there: without
it nova would silently stop at its ``max_limit`` servers).

openstacksdk 4.22 has ``compute.usages()`` (``openstack.compute.v2.usage.Usage``), which follows the
same links; it builds a ``Resource`` per server, as its server listing does, which costs about 10 ms a
server here (``tally bench openstack``). The pages are read as JSON through the same compute proxy
(``openstack_pages``): the session, catalog, microversion header, retries and timeouts are the SDK's.

``start``/``end`` are sent as nova parses them: naive UTC (``%Y-%m-%dT%H:%M:%S.%f``); an offset is
refused by nova with a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.providers.interface import AdapterError
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.providers.openstack.pages import ListCall, MalformedPage, pages
from tally_pipeline.providers.openstack.usage_audit import NovaServerUsage, nova_hours


@dataclass(frozen=True)
class NovaUsage:
    """Nova's usage of every server in the window, and what reading it cost."""

    servers: list[NovaServerUsage]
    #: per project, nova's own totals summed over the pages: total_hours and total_vcpus_usage
    totals: dict[str, tuple[str, str]]
    #: the window's end nova used (it cuts ``end`` to its now); None when no project was listed
    stop: datetime | None
    pages: int
    microversion: str


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise MalformedPage(f"usage time {value!r} is not a string")
    text = value[:-1] if value.endswith("Z") else value
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _nova_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def read_usage(adapter: OpenStackAdapter, start: datetime, end: datetime, *, page_size: int | None = None) -> NovaUsage:
    """Every project's usage over ``[start, end)`` as nova reports it. Raises ``AdapterError`` saying why
    when nova cannot be read (a 403: the credentials are not admin; a page that is not nova's)."""
    try:
        microversion = adapter._nova_microversion()
        params = {"start": _nova_time(start), "end": _nova_time(end), "detailed": "1"}
        call = ListCall("/os-simple-tenant-usage", "tenant_usages", params, microversion)
        servers: list[NovaServerUsage] = []
        totals: dict[str, list[float]] = {}
        stop: datetime | None = None
        count = 0
        for page in pages(adapter.connection.compute, call, page_size=page_size or adapter.config.page_size):
            count += 1
            for tenant in page:
                if not isinstance(tenant, dict) or not isinstance(tenant.get("server_usages"), list):
                    raise MalformedPage("a tenant usage without server_usages (was detailed=1 ignored?)")
                project = str(tenant.get("tenant_id"))
                sums = totals.setdefault(project, [0.0, 0.0])
                sums[0] += float(tenant.get("total_hours") or 0)
                sums[1] += float(tenant.get("total_vcpus_usage") or 0)
                stop = _time(tenant.get("stop")) or stop
                for raw in tenant["server_usages"]:
                    servers.append(NovaServerUsage(
                        server_id=str(raw["instance_id"]), project_id=str(raw.get("tenant_id") or project),
                        hours=nova_hours(raw.get("hours") or 0), vcpus=int(raw.get("vcpus") or 0),
                        started_at=_time(raw.get("started_at")), ended_at=_time(raw.get("ended_at")),
                        flavor=str(raw.get("flavor") or ""),
                    ))
    except AdapterError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise AdapterError(f"nova's usage answer is not what its API reference shows: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - one reason, naming the service
        raise AdapterError(f"nova's usage (os-simple-tenant-usage): {adapter._explain('instance', exc)}") from exc
    return NovaUsage(servers, {p: (repr(h), repr(v)) for p, (h, v) in totals.items()}, stop, count, microversion)
