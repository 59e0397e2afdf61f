"""The OpenStack adapter: what a cloud really holds, listed across all projects through openstacksdk.

=============  ===============  ==============================================================
our type       service          size
=============  ===============  ==============================================================
instance       compute (nova)   the embedded flavor (microversion >= 2.47): name, vcpus, ram, disk
volume         volumev3         ``size`` GiB and ``volume_type``
floating_ip    network          ``floating_network_id``
image          image (glance)   ``size`` bytes (null while queued)
load_balancer  load-balancer    ``flavor_id``
=============  ===============  ==============================================================

The SDK gives the connection (clouds.yaml, keystone, the catalog, version and microversion
discovery, timeouts, retries); pages are read as JSON one at a time (``openstack_pages``), so
memory stays flat for any cloud size. Whatever goes wrong while listing one type (service missing
from the catalog, an HTTP error, a timeout, a page that is not what the API promises) is raised as
an ``AdapterError`` with a short reason, which ``adapters.base.list_type`` turns into that type's
``Failed(reason)``; the other types carry on. One unreadable record is skipped with its reason
(``openstack_records``), not a failure of its type.

A resource missing from a listing is asked for by id before reconciliation deletes it
(``confirm_gone``): nova leaves the servers of a down cell out of every paged listing
(``list_records_by_skipping_down_cells``), so absence alone proves nothing. Each type's poll time is
the ``Date`` its service put on the listing's first page (``observed_at``).

A type is listed only when the token provably sees every project (``listing_scope``, the rules in
``core.scope``): cinder, neutron, glance and octavia silently narrow a listing to what the caller
may see, and a GET by id of another project's resource answers 404, which would confirm deletes
that never happened. A 403 on a listing is the same verdict, said loudly (nova).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import openstack
import requests
from keystoneauth1 import discover
from keystoneauth1 import exceptions as ks_exceptions
from openstack import exceptions as sdk_exceptions
from openstack.connection import Connection

import tally_pipeline.providers.openstack.records as records
from tally_pipeline.config import OpenStackCloud
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.providers.interface import (
    AdapterError,
    Confirmation,
    DeletedListing,
    DeletedResource,
    InsufficientScope,
    ListedResource,
    ListingScope,
    SkipItem,
    SkippedResource,
    confirm_each,
)
from tally_pipeline.providers.openstack import RESIZE_EVENT_TYPES, TYPES
from tally_pipeline.providers.openstack import actions as action_rules
from tally_pipeline.providers.openstack import scope as scope_rules
from tally_pipeline.providers.openstack.actions import InstanceAction
from tally_pipeline.providers.openstack.dating import ACTION_DATING
from tally_pipeline.providers.openstack.pages import ListCall, MalformedPage, pages
from tally_pipeline.schemas import default_registry

log = logging.getLogger(__name__)

#: The packaged resource types (each has a record mapper below), in the registry's order.
RESOURCE_TYPES = default_registry().in_order
#: How each type's service is named in reasons (the catalog's service type).
SERVICE_OF = {name: t.catalog for name, t in TYPES.items()}
#: Nova embeds the flavor (name, vcpus, ram, disk) in a server from this microversion on.
NOVA_FLAVOR_MICROVERSION = (2, 47)
#: The newest nova microversion whose server listing we know; asked for when nova offers it.
NOVA_NEWEST_KNOWN = (2, 96)
#: Retried besides connection failures and timeouts: rate limits and gateways that blink.
RETRIABLE_STATUS_CODES = (429, 502, 503, 504)
#: An action requested this long before the last observation may still have been done after it (a
#: long resize): its events are read; older ones are not (``instance_actions``).
ACTION_MARGIN = timedelta(days=1)
#: How many "is it really gone?" requests run at once, per type, after a listing.
CONFIRM_CONCURRENCY = 8
#: Per type: the SDK proxy, the show-by-id path and the key holding the record (glance: the body).
_SHOW: dict[str, tuple[str, str, str | None]] = {
    "instance": ("compute", "/servers/{}", "server"),
    "volume": ("block_storage", "/volumes/{}", "volume"),
    "floating_ip": ("network", "/floatingips/{}", "floatingip"),
    "image": ("image", "/images/{}", None),
    "load_balancer": ("load_balancer", "/lbaas/loadbalancers/{}", "loadbalancer"),
}
#: Statuses under which a service still shows a record it has deleted (glance with delayed delete,
#: octavia for a while after a delete, nova's soft delete): gone for billing.
_GONE_STATUSES: dict[str, frozenset[str]] = {
    "instance": frozenset({"DELETED", "SOFT_DELETED"}),
    "image": frozenset({"DELETED"}),
    "load_balancer": frozenset({"DELETED"}),
}
#: The SDK's config-key prefixes of the services we read.
_SDK_SERVICE_KEYS = ("compute", "block_storage", "network", "image", "load_balancer")


class OpenStackAdapter:
    """Lists one OpenStack cloud. Connects on first use; reusable across runs; ``close()`` when done.

    ``connection`` lets a caller hand in an ``openstack.connection.Connection`` it built itself;
    otherwise one is made from ``config`` (a clouds.yaml entry, inline ``auth``, or the SDK's
    environment lookup).
    """

    #: How nova's actions (``instance_actions``) date reconciliation's corrections.
    dating = ACTION_DATING
    #: The event types whose update changes a resource's size.
    resize_event_types = RESIZE_EVENT_TYPES

    def __init__(self, cloud: str, config: OpenStackCloud, *, connection: Connection | None = None,
                 clock: Callable[[], datetime] | None = None):
        self.cloud = cloud
        self._clock = clock or (lambda: datetime.now(UTC))
        #: Per type, when its latest listing was answered (see ``observed_at``).
        self._observed: dict[str, datetime] = {}
        self.config = config
        self.resource_types: tuple[str, ...] = tuple(config.resource_types or RESOURCE_TYPES)
        self._connection = connection
        self._owns_connection = connection is None
        self._lock = threading.Lock()
        #: The microversion asked of nova, once servers were listed.
        self.nova_microversion: str | None = None

    # --- connection ------------------------------------------------------------------------

    @property
    def connection(self) -> Connection:
        with self._lock:
            if self._connection is None:
                self._connection = connect(self.config)
            return self._connection

    def close(self) -> None:
        with self._lock:
            conn, self._connection = self._connection, None
        if conn is not None and self._owns_connection:
            conn.close()

    def __enter__(self) -> OpenStackAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the adapter protocol --------------------------------------------------------------

    def enumerate(self, resource_type: str, *, at: datetime) -> Iterator[ListedResource | SkippedResource]:
        """Stream every resource of one type across all projects, page by page (``at`` is ignored:
        a real cloud answers for now)."""
        if resource_type not in self.resource_types:
            raise AdapterError(f"{resource_type} is not listed for cloud {self.cloud}")
        lister = _LISTERS[resource_type]
        self._observed[resource_type] = self._clock()
        try:
            yield from lister(self)
        except AdapterError:
            raise
        except sdk_exceptions.HttpException as exc:
            if exc.status_code == 403:  # the service's policy refuses the all-projects listing
                raise InsufficientScope(f"insufficient_scope: {self._explain(resource_type, exc)}") from exc
            raise AdapterError(self._explain(resource_type, exc)) from exc
        except Exception as exc:  # noqa: BLE001 - every failure becomes this type's reason
            raise AdapterError(self._explain(resource_type, exc)) from exc

    def credentials(self) -> scope_rules.Credentials:
        """Who the token says we are: user, project, roles (implied ones included), system scope.

        Raises ``AdapterError`` saying why when there is no token (bad password, keystone down)."""
        try:
            session = self.connection.session
            access = session.auth.get_access(session)  # type: ignore[union-attr]  # no auth raises, and says why
        except Exception as exc:  # noqa: BLE001 - the reason names what went wrong
            raise AdapterError(self._explain("identity", exc)) from exc
        return scope_rules.Credentials(
            user=access.username, project_id=access.project_id, project_name=access.project_name,
            roles=frozenset(access.role_names or ()), system_scope=bool(access.system_scoped))

    def listing_scope(self, resource_type: str) -> ListingScope:
        """Whether this cloud's credentials list every project's ``resource_type`` (``core.scope``).

        Asked as a listing of the type begins: the previous listing's date is forgotten, so a type
        not listed this time has no stale poll time."""
        self._observed.pop(resource_type, None)
        return scope_rules.listing_scope(resource_type, self.credentials(), self.config.all_projects_roles)

    def observed_at(self, resource_type: str) -> datetime | None:
        """When the type's latest listing was observed: the ``Date`` its service put on the first
        page, else our clock as the listing began."""
        return self._observed.get(resource_type)

    def _answered(self, resource_type: str) -> Callable[[datetime], None]:
        return lambda stamp: self._observed.__setitem__(resource_type, stamp)

    def deleted_since(self, since: datetime, *, at: datetime) -> DeletedListing:
        """Nova's deleted servers changed since ``since`` minus ``deleted_margin``, with real deletion times.

        The listing holds ``DELETED`` servers and ``SOFT_DELETED`` ones (billing ends at the soft
        delete). ``deleted=true`` is honoured for admins only and silently ignored for anyone else,
        who then gets live servers too: if anything listed is neither, the capability is reported
        unavailable instead of misreading live servers as deleted. An unreadable record is left out
        (its delete, if any, is then confirmed by asking for it).
        """
        if "instance" not in self.resource_types:
            return DeletedListing(False, reason=f"instances are not listed for cloud {self.cloud}")
        window_start = since - timedelta(seconds=self.config.deleted_margin)
        items: list[DeletedResource] = []
        try:
            params = {"all_tenants": "True", "deleted": "True", "changes-since": _query_time(window_start)}
            call = ListCall("/servers/detail", "servers", params, self._nova_microversion())
            for page in pages(self.connection.compute, call, page_size=self.config.page_size):
                for raw in page:
                    status = str(raw.get("status") or "") if isinstance(raw, dict) else ""
                    if status.upper() not in records.DELETED_STATUSES:
                        sid = raw.get("id") if isinstance(raw, dict) else None
                        return DeletedListing(False, reason=(
                            f"nova ignored the deleted filter (server {sid} is {status or 'without a status'}): "
                            "listing deleted servers needs the admin role"
                        ))
                    try:
                        items.append(records.deleted_server(raw))
                    except SkipItem:
                        continue
        except Exception as exc:  # noqa: BLE001 - unavailable, with the reason, never a guess
            reason = str(exc) if isinstance(exc, AdapterError) else self._explain("instance", exc)
            return DeletedListing(False, reason=reason[:500])
        return DeletedListing(True, items)

    def confirm_gone(self, resource_type: str, resource_ids: Sequence[str], *,
                     at: datetime, deadline: float | None = None) -> dict[str, Confirmation]:
        """Ask each service by id about resources missing from its listing (``at`` is ignored).

        Gone on 404, or on a record the service shows as deleted (nova ``DELETED`` /
        ``SOFT_DELETED``, glance ``deleted``, octavia ``DELETED``), dated by it when it can be.
        A server nova answers 404 for is then looked up in nova's deleted listing by its id, for its
        real ``terminated_at``. Anything else (a live record, ``UNKNOWN``, an error, a timeout) is
        not a confirmation. At most ``CONFIRM_CONCURRENCY`` requests are in flight, and none starts
        after ``deadline``.
        """
        if resource_type not in _SHOW:
            return {rid: Confirmation(rid, False, f"{resource_type} cannot be asked for by id") for rid in resource_ids}
        proxy_name, path, key = _SHOW[resource_type]
        service = SERVICE_OF[resource_type]
        try:
            proxy = getattr(self.connection, proxy_name)
            microversion = self._nova_microversion() if resource_type == "instance" else None
        except Exception as exc:  # noqa: BLE001 - no answer at all: every one stays unconfirmed
            reason = self._explain(resource_type, exc)
            return {rid: Confirmation(rid, False, reason) for rid in resource_ids}

        def ask(rid: str) -> Confirmation:
            try:
                response = proxy.get(path.format(urllib.parse.quote(rid, safe="")), microversion=microversion,
                                     headers={"Accept": "application/json"}, raise_exc=False)
            except Exception as exc:  # noqa: BLE001 - a timeout or a refused connection is no answer
                return Confirmation(rid, False, self._explain(resource_type, exc))
            answer = _confirmation(resource_type, rid, service, key, response)
            if resource_type == "instance" and response.status_code == 404:
                answer = self._dated_by_deleted_listing(answer, microversion)
            return answer

        return confirm_each(list(resource_ids), ask, concurrency=CONFIRM_CONCURRENCY, deadline=deadline)

    def _dated_by_deleted_listing(self, answer: Confirmation, microversion: str | None) -> Confirmation:
        """A 404'd server, dated by nova's deleted listing (filtered to its id) when nova still has it.

        Nova forgets a deleted server only when an operator archives it; until then the deleted
        listing holds its ``terminated_at``. Without it (archived, or the listing fails) the delete
        is dated at the poll time, as before.
        """
        rid = answer.resource_id
        params = {"all_tenants": "True", "deleted": "True", "uuid": rid}
        try:
            call = ListCall("/servers/detail", "servers", params, microversion)
            for page in pages(self.connection.compute, call, page_size=self.config.page_size):
                for raw in page:
                    if not isinstance(raw, dict) or raw.get("id") != rid:
                        continue
                    if str(raw.get("status") or "").upper() not in records.DELETED_STATUSES:
                        return answer  # nova ignored the filters: nothing to learn here
                    found = records.deleted_server(raw)
                    return Confirmation(rid, True, f"{answer.detail}; deleted at {found.deleted_at.isoformat()} per "
                                                   "nova's deleted listing", found.deleted_at)
        except Exception:  # noqa: BLE001 - only the date is missing: the 404 still confirms
            return answer
        return answer

    def instance_actions(self, server_ids: Sequence[str], *, since: Mapping[str, datetime] | None = None,
                         deadline: float | None = None) -> dict[str, list[InstanceAction]]:
        """Nova's instance actions of each server, the relevant ones with their events (``providers/openstack/actions.py``).

        One request lists a server's actions (``server_actions``); one more per action that can change
        a status or a flavor reads its events (``get_server_action``), for their finish times — only
        for actions requested after ``since[server]`` minus ``ACTION_MARGIN`` when given (older ones
        cannot explain a change made after it). A server whose actions cannot be read is left out (its
        corrections fall back to ``updated`` or the poll); at most ``CONFIRM_CONCURRENCY`` servers are
        asked at once, none after ``deadline``.
        """
        compute = self.connection.compute
        horizon = {sid: at - ACTION_MARGIN for sid, at in (since or {}).items()}

        def ask(sid: str) -> list[InstanceAction] | None:
            if deadline is not None and time.monotonic() > deadline:
                return None
            found = []
            after = horizon.get(sid)
            for listed in compute.server_actions(sid):
                bare = records.instance_action(listed, None)
                if bare.action not in action_rules.RELEVANT or (after is not None and bare.start_time < after):
                    found.append(bare)  # its events cannot matter: not read
                    continue
                found.append(records.instance_action(listed, compute.get_server_action(listed.request_id, sid)))
            return found

        def safe(sid: str) -> list[InstanceAction] | None:
            try:
                return ask(sid)
            except Exception as exc:  # noqa: BLE001 - no record read: the correction is dated without it
                # counted where it shows (dated_by updated/poll); said here with the cause
                log.warning("instance actions of server %s not read, its corrections dated without them: %s: %s",
                            sid, type(exc).__name__, exc)
                return None

        ids = list(dict.fromkeys(server_ids))
        if len(ids) <= 1:
            answers = [safe(sid) for sid in ids]
        else:
            with ThreadPoolExecutor(max_workers=min(CONFIRM_CONCURRENCY, len(ids)), thread_name_prefix="actions") as pool:
                answers = list(pool.map(safe, ids))
        return {sid: found for sid, found in zip(ids, answers) if found is not None}

    def volume_type_names(self) -> dict[str, str]:
        """Cinder's volume types, id → name, private ones included (needs admin).

        Cinder's notifications name a volume's type by id while its API shows the name; a
        collector passes this to ``providers.openstack.notifications.map_notification`` so both paths agree.
        """
        types = self.connection.block_storage.types(is_public="None")
        return {t.id: t.name for t in types}

    # --- listings, one generator per type --------------------------------------------------

    def _servers(self) -> Iterator[ListedResource | SkippedResource]:
        # nova answers all_tenants with 403 to anyone its policy does not allow, never narrowed.
        call = ListCall("/servers/detail", "servers", {"all_tenants": "True"}, self._nova_microversion())
        for page in pages(self.connection.compute, call, page_size=self.config.page_size,
                          answered_at=self._answered("instance")):
            for raw in page:
                yield _mapped(records.server, raw)

    def _volumes(self) -> Iterator[ListedResource | SkippedResource]:
        call = ListCall("/volumes/detail", "volumes", {"all_tenants": "True"})
        for page in pages(self.connection.block_storage, call, page_size=self.config.page_size,
                          answered_at=self._answered("volume")):
            for raw in page:
                yield _mapped(records.volume, raw)

    def _floating_ips(self) -> Iterator[ListedResource | SkippedResource]:
        # Neutron shows an admin every project's addresses without asking.
        call = ListCall("/floatingips", "floatingips")
        for page in pages(self.connection.network, call, page_size=self.config.page_size,
                          answered_at=self._answered("floating_ip")):
            for raw in page:
                yield _mapped(records.floating_ip, raw)

    def _images(self) -> Iterator[ListedResource | SkippedResource]:
        # Glance's default listing leaves out community images and (since 2.7) hidden ones, and
        # both are billed to their owner: ask for every visibility, then for the hidden ones.
        proxy = self.connection.image
        for hidden in ("false", "true"):
            call = ListCall("/images", "images", {"visibility": "all", "os_hidden": hidden})
            answered = self._answered("image") if hidden == "false" else None
            for page in pages(proxy, call, page_size=self.config.page_size, answered_at=answered):
                for raw in page:
                    yield _mapped(records.image, raw)

    def _load_balancers(self) -> Iterator[ListedResource | SkippedResource]:
        call = ListCall("/lbaas/loadbalancers", "loadbalancers")
        for page in pages(self.connection.load_balancer, call, page_size=self.config.page_size,
                          answered_at=self._answered("load_balancer")):
            for raw in page:
                yield _mapped(records.load_balancer, raw)

    # --- helpers ---------------------------------------------------------------------------

    def _nova_microversion(self) -> str:
        """The microversion to ask nova for: its newest up to the newest we know, at least 2.47.

        2.47 embeds the flavor in each server; from 2.69 a server in an unreachable cell is
        listed as UNKNOWN instead of silently left out (which would read as a deletion).
        """
        compute = self.connection.compute
        data = compute.get_endpoint_data()
        offered = tuple(data.max_microversion) if data is not None and data.max_microversion else None
        if offered is None or offered < NOVA_FLAVOR_MICROVERSION:
            shown = "none" if offered is None else discover.version_to_string(offered)
            raise AdapterError(
                f"nova at {compute.get_endpoint()} offers microversion {shown}; "
                "2.47 or later is needed for servers' embedded flavors"
            )
        chosen = discover.version_to_string(min(offered, NOVA_NEWEST_KNOWN))
        self.nova_microversion = chosen
        return chosen

    def _explain(self, resource_type: str, exc: BaseException) -> str:
        """A short reason for a failed type, naming the service and what went wrong."""
        service = SERVICE_OF.get(resource_type, resource_type)
        if isinstance(exc, sdk_exceptions.ServiceDisabledException | ks_exceptions.EndpointNotFound):
            region = self.config.region_name
            return f"{service} service not in catalog" + (f" for region {region}" if region else "")
        if isinstance(exc, sdk_exceptions.HttpException):
            status = exc.status_code
            where = _short_url(exc.url if isinstance(exc.url, str) else None)
            detail = (exc.details or "").strip()
            text = f"HTTP {status} from {service}" + (f" ({where})" if where else "")
            return f"{text}: {detail}" if detail else text
        if isinstance(exc, ks_exceptions.Unauthorized):
            return f"authentication refused: {exc}"
        if isinstance(exc, ks_exceptions.ConnectTimeout | requests.exceptions.Timeout):
            attempts = self.config.retries + 1
            return (f"timed out after {self.config.timeout:g}s waiting for {service}"
                    + (f" ({attempts} attempts)" if attempts > 1 else ""))
        if isinstance(exc, ks_exceptions.ConnectFailure | requests.exceptions.ConnectionError):
            return f"cannot connect to {service}: {exc}"
        if isinstance(exc, ks_exceptions.HttpError):
            return f"HTTP {exc.http_status} from {service}: {exc.message}"
        if isinstance(exc, MalformedPage):
            return f"malformed page from {service}: {exc}"
        if isinstance(exc, sdk_exceptions.ConfigException):
            return f"configuration for cloud {self.cloud}: {exc}"
        return f"{service}: {type(exc).__name__}: {exc}"


def _mapped(mapper: Callable[[dict[str, Any]], ListedResource], raw: Any) -> ListedResource | SkippedResource:
    try:
        return mapper(raw)
    except SkipItem as skip:
        return skip.item


def _confirmation(resource_type: str, rid: str, service: str, key: str | None, response: Any) -> Confirmation:
    """What one show-by-id answer says about a resource missing from its listing."""
    status = response.status_code
    if status == 404:
        return Confirmation(rid, True, f"404 from {service}")
    if status != 200:
        return Confirmation(rid, False, f"HTTP {status} from {service}")
    try:
        body = response.json()
        record = body if key is None else body[key]
        shown = str(record.get("provisioning_status") or record.get("status") or "").upper()
    except (ValueError, KeyError, TypeError, AttributeError):
        return Confirmation(rid, False, f"unreadable answer from {service}")
    if shown in _GONE_STATUSES.get(resource_type, frozenset()):
        updated = record.get("updated") or record.get("updated_at")
        when = (records.deletion_time(record, rid, records.parse_time(updated) if isinstance(updated, str) else None)
                if resource_type == "instance" else
                records.parse_time(updated) if isinstance(updated, str) and updated else None)
        return Confirmation(rid, True, f"{service} shows it {shown}", when)
    return Confirmation(rid, False, f"{service} still answers: status {shown or 'none'}"
                        + (" (unreachable cell)" if shown == records.UNKNOWN else ""))


_LISTERS: dict[str, Callable[[OpenStackAdapter], Iterator[ListedResource | SkippedResource]]] = {
    "instance": OpenStackAdapter._servers,
    "volume": OpenStackAdapter._volumes,
    "floating_ip": OpenStackAdapter._floating_ips,
    "image": OpenStackAdapter._images,
    "load_balancer": OpenStackAdapter._load_balancers,
}


def connect(config: OpenStackCloud) -> Connection:
    """An SDK connection with our timeouts and bounded retries.

    ``os_cloud`` names a clouds.yaml entry, found as every OpenStack tool finds it
    (``OS_CLIENT_CONFIG_FILE``, ``./clouds.yaml``, ``~/.config/openstack/``, ``/etc/openstack/``);
    inline ``auth`` settings are merged over it, or stand alone. A ``Retry-After`` above
    ``max_retry_delay`` is cut down to it before keystoneauth reads it (see ``cap_retry_after``).
    """
    conn = _connect(config)
    conn.session.session.hooks["response"].append(cap_retry_after(config.max_retry_delay))
    return conn


def cap_retry_after(limit: float) -> Callable[..., Any]:
    """A requests response hook: a ``Retry-After`` of more than ``limit`` seconds becomes ``limit``.

    keystoneauth sleeps for whatever whole number of seconds a retriable answer (429, 503) asks,
    without bound: a gateway's ``Retry-After: 3600`` would hold a run for an hour per retry. The
    hook runs inside requests, before keystoneauth sees the answer. keystoneauth reads whole
    seconds only, so the cap is rounded down; an HTTP-date is left alone (keystoneauth then waits
    its own ``retry_delay``).
    """
    ceiling = str(math.floor(limit))

    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
        asked = response.headers.get("Retry-After")
        if asked is not None:
            try:
                too_long = float(asked.strip()) > limit
            except ValueError:
                too_long = False
            if too_long:
                response.headers["Retry-After"] = ceiling
        return response

    return hook


def _connect(config: OpenStackCloud) -> Connection:
    retry: dict[str, Any] = {
        "connect_retries": config.retries,
        "status_code_retries": config.retries,
        "retriable_status_codes": list(RETRIABLE_STATUS_CODES),
    }
    if config.retry_delay is not None:
        retry["connect_retry_delay"] = config.retry_delay
        retry["status_code_retry_delay"] = config.retry_delay
    options: dict[str, Any] = {"app_name": "tally-pipeline", "api_timeout": config.timeout, **retry}
    # The SDK's defaults carry per-service values (image_status_code_retries: 5) that win over the
    # unprefixed ones: set ours per service too, so the bound holds everywhere.
    for service in _SDK_SERVICE_KEYS:
        options.update({f"{service}_{key}": value for key, value in retry.items()})
    for key in ("auth", "auth_type", "region_name", "interface"):
        value = getattr(config, key)
        if value is not None:
            options[key] = value
    if isinstance(config.verify, str):
        options["cacert"] = config.verify  # a CA bundle: clouds.yaml spells it cacert
    elif config.verify is not None:
        options["verify"] = config.verify
    if config.os_cloud is not None:
        return openstack.connect(cloud=config.os_cloud, **options)
    if config.auth is not None:
        # Inline settings only: no clouds.yaml or OS_* variables mixed in behind the operator's back.
        return openstack.connect(load_yaml_config=False, load_envvars=False, **options)
    return openstack.connect(**options)


def _query_time(value: datetime) -> str:
    """An ISO string nova accepts for changes-since, rounded down to the second."""
    return format_rfc3339(value.astimezone(UTC).replace(microsecond=0))


def _short_url(url: str | None) -> str | None:
    if not url:
        return None
    return url.split("?", 1)[0]
