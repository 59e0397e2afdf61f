"""Page through one OpenStack list API over an openstacksdk service proxy, one page at a time.

The SDK's proxies give us the authenticated session, the endpoint from the catalog (after version
discovery), microversion headers, timeouts and retries. Its ``Resource`` objects we skip: building
one costs about 10 ms per nova server here (``tally bench openstack``), which would make listing
a 50,000-server cloud take longer than the sync interval. Pages are parsed as plain JSON instead.

Each service says "there is more" its own way (nova/cinder/neutron/octavia ``<key>_links``,
glance a top-level ``next``); only the marker is taken from that link and the next request is
made against the same endpoint, so a next link with a wrong host or scheme (a common proxy
misconfiguration) does no harm.
"""

from __future__ import annotations

import email.utils
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from openstack import exceptions as sdk_exceptions

from tally_pipeline.core.errors import PlatformError
from tally_pipeline.providers.interface import MarkerVanished


class MalformedPage(PlatformError, ValueError):
    """A page that is not what the service's API reference promises."""


@dataclass(frozen=True)
class ListCall:
    """One list API: where it is (relative to the service endpoint) and which key holds the items."""

    path: str
    key: str
    params: dict[str, str] = field(default_factory=dict)
    microversion: str | None = None


def pages(proxy: Any, call: ListCall, *, page_size: int,
          answered_at: Callable[[datetime], None] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Yield each page's items until the service stops linking a next page.

    ``answered_at`` receives the instant the service dated its first page (its ``Date`` header).
    """
    params = {**call.params, "limit": str(page_size)}
    previous: str | None = None
    while True:
        response = proxy.get(call.path, params=params, microversion=call.microversion,
                             headers={"Accept": "application/json"})
        if previous is not None and response.status_code in (400, 404):
            # cinder, glance and octavia answer 400, neutron 404, when the marker's resource was
            # deleted between two pages (nova finds deleted markers, until they are archived)
            raise MarkerVanished(f"the page after marker {previous} was refused (HTTP {response.status_code}): "
                                 "the marker's resource went away between two pages")
        sdk_exceptions.raise_from_response(response)
        if answered_at is not None and previous is None:
            stamp = response_date(response)
            if stamp is not None:
                answered_at(stamp)
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise MalformedPage(f"page is not JSON ({exc})") from None
        items = body.get(call.key) if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise MalformedPage(f"page has no {call.key!r} list")
        yield items
        marker = next_marker(body, call.key)
        if not items or marker is None:
            return
        if marker == previous:
            raise MalformedPage(f"next link repeats marker {marker!r}")
        previous = marker
        params["marker"] = marker


def next_marker(body: dict[str, Any], key: str) -> str | None:
    """The marker of the next page, from ``<key>_links`` or glance's top-level ``next``."""
    href = None
    links = body.get(f"{key}_links")
    if isinstance(links, list):
        for link in links:
            if isinstance(link, dict) and link.get("rel") == "next" and isinstance(link.get("href"), str):
                href = link["href"]
                break
    if href is None and isinstance(body.get("next"), str):
        href = body["next"]
    if href is None:
        return None
    markers = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query).get("marker")
    if not markers:
        raise MalformedPage(f"next link {href!r} has no marker")
    return markers[-1]


def response_date(response: Any) -> datetime | None:
    """The ``Date`` header of a response (RFC 9110: the instant the server made it), if readable."""
    value = response.headers.get("Date") if response is not None else None
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
