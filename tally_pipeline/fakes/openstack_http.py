"""The fake OpenStack's HTTP side: routing, keystone, version documents and the five listings.

Each listing pages the way its service does (``_page``), renders records in the service's own
JSON (``openstack_json``) and applies the faults injected on ``FakeOpenStack``.
"""

from __future__ import annotations

import email.utils
import json
import secrets
import urllib.parse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tally_pipeline.fakes import openstack_json as render
from tally_pipeline.fakes import openstack_show
from tally_pipeline.fakes.openstack_model import CINDER_MAX, DOMAIN, SERVICES, Fault, RecordedRequest, Service, Token
from tally_pipeline.providers.simulated.platform import PlatformRecord, in_down_cell

if TYPE_CHECKING:
    from tally_pipeline.fakes.openstack import FakeOpenStack


class _Reply(Exception):
    """Raised inside a handler to answer with a status and a JSON body."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class FakeServer(ThreadingHTTPServer):
    """The fake's HTTP server: its handlers reach the fake through it."""

    fake: FakeOpenStack


class Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"  # keep-alive, as a real API endpoint
    server_version = "FakeOpenStack/1"
    timeout = 60  # an idle keep-alive connection is dropped after this

    @property
    def fake(self) -> FakeOpenStack:
        return self.server.fake

    def setup(self) -> None:
        super().setup()
        self.fake._track(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.fake._track(self.connection, open_=False)

    def date_time_string(self, timestamp: float | None = None) -> str:
        """Every answer is dated by the fake's clock, as a real service dates it by its own."""
        return email.utils.formatdate(self.fake.now().timestamp() if timestamp is None else timestamp, usegmt=True)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Requests are recorded in ``FakeOpenStack.requests`` instead of printed."""

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    # --- dispatch ------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        parts = urllib.parse.urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        self._context: dict[str, Any] = {"resource_type": None, "microversion": None, "show": False,
                                         "method": method, "path": parts.path, "query": query}
        try:
            if method == "POST":
                self._post(path)
            else:
                self._get(path, query)
            raise _Reply(404, {"error": {"code": 404, "message": f"no route for {method} {path}"}})
        except _Reply as reply:
            self._record(method, parts.path, query, reply.status)
            self._send(reply.status, reply.body, reply.headers, head=method == "HEAD")
        except _Hang:
            self._record(method, parts.path, query, 0)
            # The client times out long before this; the wait ends at once when the server stops.
            self.fake._stopping.wait(self.fake.hang_limit)
            self.close_connection = True
        except _Malformed as bad:
            self._record(method, parts.path, query, 200)
            self._send_raw(200, bad.body)

    def _record(self, method: str, path: str, query: dict[str, list[str]], status: int) -> None:
        header = self.headers.get("OpenStack-API-Version") or self.headers.get("X-OpenStack-Nova-API-Version")
        self.fake._record(RecordedRequest(
            method, path, query, self._context["resource_type"], header, self._context["microversion"], status,
            self._context["show"],
        ))

    def _send(self, status: int, body: Any, headers: dict[str, str], *, head: bool = False) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-openstack-request-id", "req-" + secrets.token_hex(8))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _send_raw(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # --- keystone --------------------------------------------------------------------------

    def _post(self, path: str) -> None:
        # Read the body whatever the route, or its bytes would be taken for the next request.
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path != "/identity/v3/auth/tokens":
            return
        try:
            body = json.loads(raw or b"{}")
            user = self.fake._check_password(body["auth"])
        except (ValueError, KeyError, TypeError):
            bad = {"code": 400, "title": "Bad Request", "message": "malformed auth request"}
            raise _Reply(400, {"error": bad}) from None
        if user is None:
            raise _Reply(401, {"error": {"code": 401, "title": "Unauthorized",
                                         "message": "The request you have made requires authentication."}})
        token, issued = self.fake._issue_token(user)
        raise _Reply(201, {"token": self._token_body(issued)}, {"X-Subject-Token": token})

    def _token_body(self, token: Token) -> dict[str, Any]:
        fake, user = self.fake, token.user
        now = datetime.now(UTC)  # expiry is about real time: the client checks it against its clock
        base = fake.base_url
        paths = {"instance": "/v2.1", "volume": f"/v3/{user.project_id}"}
        endpoints_for = {rtype: f"{base}{spec.prefix}{paths.get(rtype, '')}" for rtype, spec in SERVICES.items()}
        catalog = [
            {
                "id": render.stable_id("service", spec.service_type),
                "type": spec.service_type,
                "name": spec.name,
                "endpoints": [
                    {"id": render.stable_id("endpoint", spec.service_type, interface), "interface": interface,
                     "region": fake.region, "region_id": fake.region, "url": endpoints_for[rtype]}
                    for interface in ("public", "internal", "admin")
                ],
            }
            for rtype, spec in SERVICES.items()
            if rtype in token.services
        ]
        catalog.append({
            "id": render.stable_id("service", "identity"), "type": "identity", "name": "keystone",
            "endpoints": [{"id": render.stable_id("endpoint", "identity", i), "interface": i, "region": fake.region,
                           "region_id": fake.region, "url": fake.auth_url} for i in ("public", "internal", "admin")],
        })
        return {
            "methods": ["password"],
            "issued_at": now.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "expires_at": (now + timedelta(hours=12)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "user": {"id": render.stable_id("user", user.name), "name": user.name, "domain": DOMAIN,
                     "password_expires_at": None},
            "project": {"id": user.project_id, "name": user.project_name, "domain": DOMAIN},
            "roles": [{"id": render.stable_id("role", r), "name": r} for r in user.roles],
            "is_domain": False,
            "catalog": catalog,
        }

    # --- GET routing -----------------------------------------------------------------------

    def _get(self, path: str, query: dict[str, list[str]]) -> None:
        fake = self.fake
        base = fake.base_url
        if path == "/identity":
            raise _Reply(300, render.keystone_versions(fake.auth_url))
        if path == "/identity/v3":
            raise _Reply(200, render.keystone_version(fake.auth_url))
        if path == "/compute":
            raise _Reply(200, {"versions": [render.nova_version(f"{base}/compute", fake.nova_max)]})
        if path == "/compute/v2.1":
            raise _Reply(200, {"version": render.nova_version(f"{base}/compute", fake.nova_max)})
        if path in ("/volume", "/volume/v3"):
            raise _Reply(300 if path == "/volume" else 200,
                         {"versions": [render.cinder_version(f"{base}/volume", CINDER_MAX)]})
        if path in ("/image", "/image/versions"):
            raise _Reply(300 if path == "/image" else 200, {"versions": [
                render.plain_version(f"v2.{minor}", f"{base}/image/v2/", "CURRENT" if minor == 16 else "SUPPORTED")
                for minor in range(16, -1, -1)
            ]})
        if path == "/network":
            raise _Reply(200, {"versions": [render.plain_version("v2.0", f"{base}/network/v2.0/")]})
        if path == "/load-balancer":
            raise _Reply(200, {"versions": [
                render.plain_version("v2.0", f"{base}/load-balancer/v2.0/", "SUPPORTED"),
                render.plain_version("v2", f"{base}/load-balancer/v2/", "CURRENT"),
            ]})
        if path == "/compute/v2.1/servers/detail":
            self._servers(query)
        if path == "/compute/v2.1/os-simple-tenant-usage" or path.startswith("/compute/v2.1/os-simple-tenant-usage/"):
            self._tenant_usage(path, query)
        if path.startswith("/compute/v2.1/servers/") and "/os-instance-actions" in path:
            self._instance_actions(path)
        self._show_routes(path)
        if path.startswith("/volume/v3/") and path.endswith("/volumes/detail"):
            volumes_url = path.rsplit("/", 2)[0]
            self._listing("volume", query, "volumes", lambda r: render.volume_json(r, base_url=volumes_url))
        if path.startswith("/volume/v3/") and path.endswith("/types"):
            self._volume_types(query)
        if path == "/network/v2.0/floatingips":
            self._listing("floating_ip", query, "floatingips", render.floating_ip_json)
        if path == "/image/v2/images":
            self._images(query)
        if path in ("/load-balancer/v2.0/lbaas/loadbalancers", "/load-balancer/v2/lbaas/loadbalancers"):
            self._listing("load_balancer", query, "loadbalancers", render.load_balancer_json)

    # --- instance actions -----------------------------------------------------------------------

    def _instance_actions(self, path: str) -> None:
        """``GET /servers/{id}/os-instance-actions`` (newest first) and ``…/{request_id}`` with its events,
        as nova 2.84 shows them (times without an offset, UTC, as nova writes them)."""
        fake = self.fake
        token = self._authorised("instance")
        self._context["resource_type"] = None  # neither a listing of servers nor a GET of one
        version = self._nova_microversion()
        self._context["microversion"] = render.format_microversion(version)
        headers = {"OpenStack-API-Version": f"compute {render.format_microversion(version)}"}
        rest = path.removeprefix("/compute/v2.1/servers/")
        server_id, _, tail = rest.partition("/os-instance-actions")
        server_id = urllib.parse.unquote(server_id)
        found = fake.actions_of(server_id)
        record = next((r for r in fake.view.records(fake.cloud, "instance", fake.now()) if r.resource_id == server_id),
                      None)
        if found is None or (record is not None and not self._visible("instance", [record], token, True)):
            raise _Reply(404, _fault_body("instance", 404, f"Instance {server_id} could not be found."), headers)
        project = record.project_id if record is not None else token.user.project_id
        request_id = urllib.parse.unquote(tail.strip("/"))
        if not request_id:
            body = [render.instance_action_json(a, server_id, project, microversion=version)
                    for a in sorted(found, key=lambda a: a.start, reverse=True)]
            raise _Reply(200, {"instanceActions": body}, headers)
        action = next((a for a in found if a.request_id == request_id), None)
        if action is None:
            raise _Reply(404, _fault_body("instance", 404, f"Action {request_id} on instance {server_id} could "
                                                           "not be found."), headers)
        detail = render.instance_action_json(action, server_id, project, microversion=version, events=True,
                                             admin=token.user.admin)
        raise _Reply(200, {"instanceAction": detail}, headers)

    # --- GET by id ------------------------------------------------------------------------------

    _SHOW_PREFIXES = (
        ("instance", "/compute/v2.1/servers/"),
        ("floating_ip", "/network/v2.0/floatingips/"),
        ("image", "/image/v2/images/"),
        ("load_balancer", "/load-balancer/v2.0/lbaas/loadbalancers/"),
        ("load_balancer", "/load-balancer/v2/lbaas/loadbalancers/"),
    )

    def _show_routes(self, path: str) -> None:
        for resource_type, prefix in self._SHOW_PREFIXES:
            rid = path.removeprefix(prefix)
            if rid != path and rid and "/" not in rid and rid != "detail":
                self._show(resource_type, urllib.parse.unquote(rid), prefix.rstrip("/").rsplit("/", 1)[0])
        if path.startswith("/volume/v3/"):
            parts = path.split("/")  # '', volume, v3, project, volumes, id
            if len(parts) == 6 and parts[4] == "volumes" and parts[5] != "detail":
                self._show("volume", urllib.parse.unquote(parts[5]), "/".join(parts[:4]))

    def _show(self, resource_type: str, rid: str, base_path: str) -> None:
        fake = self.fake
        token = self._authorised(resource_type)
        self._context["show"] = True
        version = None
        headers: dict[str, str] = {}
        if resource_type == "instance":
            version = self._nova_microversion()
            self._context["microversion"] = render.format_microversion(version)
            headers["OpenStack-API-Version"] = f"compute {render.format_microversion(version)}"
        self._apply_fault(resource_type, resource_type, show=True)
        record = openstack_show.find(fake.view, fake.cloud, resource_type, rid, fake.now())
        if record is not None and not fake.present([record]):
            record = None  # vanished: deleted since
        if record is not None and not self._visible(resource_type, [record], token, True):
            record = None  # another project's resource: a caller who may not see it is told it does not exist
        base_url = f"{fake.base_url}{base_path}"
        renderers: dict[str, Callable[[PlatformRecord], dict[str, Any]]] = {
            "instance": lambda r: render.server_json(r, microversion=version or (2, 1), base_url=base_url),
            "volume": lambda r: render.volume_json(r, base_url=base_url),
            "floating_ip": render.floating_ip_json,
            "image": self._image_json,
            "load_balancer": render.load_balancer_json,
        }
        status, body = openstack_show.show(
            resource_type, record, down_cell=resource_type == "instance" and self._down(rid), microversion=version,
            render_one=lambda r: fake.patched(renderers[resource_type](r)),
            not_found=_fault_body(resource_type, 404, f"{resource_type} {rid} could not be found."),
            unreachable=_fault_body(resource_type, 503, "The cell of this server cannot be reached."),
            base_url=base_url,
        )
        raise _Reply(status, body, headers)

    def _down_among(self, records: list[PlatformRecord]) -> set[str]:
        """The ids among ``records`` in a down cell (one snapshot per request: listings are long)."""
        fake = self.fake
        if fake.view.failure(fake.cloud, "instance") == "down_cell":
            return {r.resource_id for r in records if self._down(r.resource_id)}
        chosen = fake.down_cell_ids()
        return {r.resource_id for r in records if r.resource_id in chosen} if chosen else set()

    def _down(self, server_id: str) -> bool:
        """In a down cell: put there by the test, or by the simulated platform's ``down_cell`` fault."""
        fake = self.fake
        return fake.in_down_cell(server_id) or (
            fake.view.failure(fake.cloud, "instance") == "down_cell" and in_down_cell(server_id))

    # --- listings ------------------------------------------------------------------------------

    def _authorised(self, resource_type: str) -> Token:
        self._context["resource_type"] = resource_type
        token = self.fake._token(self.headers.get("X-Auth-Token"))
        if token is None:
            raise _Reply(401, {"error": {"code": 401,
                                         "message": "The request you have made requires authentication."}})
        if resource_type not in token.services:
            raise _Reply(404, {"error": {"code": 404, "message": "endpoint not in this token's catalog"}})
        return token

    def _apply_fault(self, resource_type: str, key: str, *, show: bool = False) -> bool:
        """Raise the injected fault, if any; True when the listing should be empty."""
        fault = self.fake._fault_for(resource_type, show=show)
        kind = fault.kind if isinstance(fault, Fault) else fault
        if kind == "hold":  # until the test releases it (or the server stops), then as usual
            context = self._context
            self._record(context["method"], context["path"], context["query"], 0)  # seen, not yet answered
            self.fake._released.wait(self.fake.hang_limit)
            return False
        if kind == "throttled":
            after = (fault.retry_after if isinstance(fault, Fault) else None) or "1"
            raise _Reply(429, _fault_body(resource_type, 429, "Rate limit exceeded"), {"Retry-After": after})
        if kind == "error":
            raise _Reply(500, _fault_body(resource_type, 500, "Unexpected API Error. Please report this."))
        if kind == "unavailable":
            raise _Reply(503, _fault_body(resource_type, 503, "Service Unavailable"))
        if kind == "timeout":
            raise _Hang()
        if kind == "malformed" and not show:
            raise _Malformed(f'{{"{key}": [{{"id": "'.encode())
        return kind == "empty"

    def _visible(self, resource_type: str, records: list[PlatformRecord], token: Token,
                 asked_all: bool) -> list[PlatformRecord]:
        """What the token's holder gets: everything when it asked for all projects and its role may
        see them; else its own project's resources (and glance's public images)."""
        fake, user = self.fake, token.user
        if asked_all and fake.sees_all(user, resource_type):
            return records
        return [r for r in records if r.project_id == user.project_id
                or (resource_type == "image" and fake.is_public(r.resource_id))]

    def _servers(self, query: dict[str, list[str]]) -> None:
        fake = self.fake
        token = self._authorised("instance")
        version = self._nova_microversion()
        self._context["microversion"] = render.format_microversion(version)
        headers = {
            "OpenStack-API-Version": f"compute {render.format_microversion(version)}",
            "X-OpenStack-Nova-API-Version": render.format_microversion(version),
            "Vary": "OpenStack-API-Version, X-OpenStack-Nova-API-Version",
        }
        empty = self._apply_fault("instance", "servers")
        all_tenants = _flag(query, "all_tenants")
        if all_tenants and not fake.sees_all(token.user, "instance"):
            raise _Reply(403, _fault_body("instance", 403, "Policy doesn't allow "
                                          "os_compute_api:servers:detail:get_all_tenants to be performed."))
        records = [] if empty else self._server_records(query, token)
        records = self._visible("instance", records, token, all_tenants)
        # nova's list_records_by_skipping_down_cells: a paged, sorted or filtered listing silently
        # leaves a down cell's servers out; an unpaged one from 2.69 shows them as UNKNOWN
        minimal = version >= openstack_show.DOWN_CELL_MICROVERSION and not (set(query) - {"all_tenants"})
        down = self._down_among(records)
        if down and not minimal:
            records = [r for r in records if r.resource_id not in down]
        base_url = f"{fake.base_url}/compute/v2.1"
        # nova finds a marker among deleted servers too (until they are archived)
        deleted = [*fake.view.deleted_servers(fake.cloud, datetime(1970, 1, 1, tzinfo=UTC), fake.now()),
                   *fake.vanished_servers()]
        page, next_marker, limit = _page(records, query, SERVICES["instance"], "instance", also_known=deleted)
        fake.count_page("instance")
        body: dict[str, Any] = {"servers": [
            render.server_unknown_json(r, base_url=base_url) if r.resource_id in down
            else fake.patched(render.server_json(r, microversion=version, base_url=base_url))
            for r in page]}
        if next_marker is not None:
            href = _next_href(f"{base_url}/servers/detail", query, limit, next_marker)
            body["servers_links"] = [{"rel": "next", "href": href}]
        raise _Reply(200, body, headers)

    def _server_records(self, query: dict[str, list[str]], token: Token) -> list[PlatformRecord]:
        """Live servers; with ``changes-since`` those changed since then plus the deleted ones;
        with an honoured ``deleted`` (admins only) the deleted ones alone."""
        fake, at = self.fake, self.fake.now()
        since = _one(query, "changes-since")
        # ``deleted`` and ``uuid`` are admin-only filters (os_compute_api:servers:allow_all_filters):
        # nova drops them silently for anyone else
        admin = token.user.admin
        honour_deleted = _flag(query, "deleted") and admin
        uuid = _one(query, "uuid") if admin else None
        live_now = fake.present(fake.view.records(fake.cloud, "instance", at))
        if since is None and not honour_deleted:
            return [r for r in live_now if uuid is None or r.resource_id == uuid]
        try:
            since_at = _parse_time(since) if since is not None else datetime(1970, 1, 1, tzinfo=UTC)
        except ValueError:
            raise _Reply(400, _fault_body("instance", 400,
                                          f"Invalid input for field/attribute changes-since. Value: {since}")) from None
        deleted = [*fake.view.deleted_servers(fake.cloud, since_at, at),
                   *(r for r in fake.vanished_servers() if r.updated_at >= since_at)]
        if not honour_deleted:
            deleted += [r for r in live_now if r.updated_at >= since_at]
        return [r for r in deleted if uuid is None or r.resource_id == uuid]

    def _tenant_usage(self, path: str, query: dict[str, list[str]]) -> None:
        """nova's usage API (``fakes/openstack_usage.py``): admins only, as nova's default policy."""
        from tally_pipeline.fakes import openstack_usage

        fake = self.fake
        token = self._authorised("instance")
        self._context["resource_type"] = None  # not a listing of servers
        version = self._nova_microversion()
        self._context["microversion"] = render.format_microversion(version)
        headers = {"OpenStack-API-Version": f"compute {render.format_microversion(version)}"}
        project = urllib.parse.unquote(path.rsplit("/", 1)[1]) if path.count("/") > 3 else None
        if not token.user.admin and project != token.user.project_id:
            raise _Reply(403, _fault_body("instance", 403, "Policy doesn't allow "
                                          "os_compute_api:os-simple-tenant-usage:list to be performed."))
        now = fake.now()
        servers = [*fake.present(fake.view.records(fake.cloud, "instance", now)),
                   *fake.view.deleted_servers(fake.cloud, datetime(1970, 1, 1, tzinfo=UTC), now),
                   *fake.vanished_servers()]
        try:
            body = openstack_usage.tenant_usage(servers, query, now=now, microversion=version,
                                                next_url=f"{fake.base_url}{path}", project_id=project)
        except openstack_usage.UsageRequestError as exc:
            raise _Reply(400, _fault_body("instance", 400, str(exc))) from None
        fake.count_usage_page()
        raise _Reply(200, body, headers)

    def _nova_microversion(self) -> tuple[int, int]:
        nova_max = self.fake.nova_max
        wanted = None
        header = self.headers.get("OpenStack-API-Version")
        if header:
            for item in header.split(","):
                service, _, value = item.strip().partition(" ")
                if service == "compute":
                    wanted = value.strip()
        if wanted is None:
            wanted = self.headers.get("X-OpenStack-Nova-API-Version")
        if wanted is None:
            return (2, 1)
        if wanted == "latest":
            return nova_max
        try:
            version = render.parse_microversion(wanted)
        except ValueError:
            raise _Reply(400, _fault_body("instance", 400, f"Invalid API version request: {wanted}")) from None
        if not (2, 1) <= version <= nova_max:
            message = (f"Version {wanted} is not supported by the API. Minimum is 2.1 and maximum is "
                       f"{render.format_microversion(nova_max)}.")
            raise _Reply(406, _fault_body("instance", 406, message))
        return version

    def _listing(self, resource_type: str, query: dict[str, list[str]], key: str,
                 to_json: Callable[[PlatformRecord], dict[str, Any]]) -> None:
        """Cinder, neutron and octavia: ``<key>`` plus ``<key>_links`` with a next link."""
        fake = self.fake
        token = self._authorised(resource_type)
        empty = self._apply_fault(resource_type, key)
        records = [] if empty else fake.present(fake.view.records(fake.cloud, resource_type, fake.now()))
        # cinder scopes by all_tenants; neutron and octavia show everything unasked to whom may see it;
        # a caller who may not gets its own project, without a word
        wants_all = _flag(query, "all_tenants") or _flag(query, "all_projects") or resource_type != "volume"
        records = self._visible(resource_type, records, token, wants_all)
        spec = SERVICES[resource_type]
        page, next_marker, limit = _page(records, query, spec, resource_type)
        fake.count_page(resource_type)
        body: dict[str, Any] = {key: [fake.patched(to_json(r)) for r in page], f"{key}_links": []}
        if next_marker is not None:
            here = f"{fake.base_url}{self.path.split('?', 1)[0]}"
            body[f"{key}_links"] = [{"rel": "next", "href": _next_href(here, query, limit, next_marker)}]
        if resource_type == "volume":
            raise _Reply(200, body, {"OpenStack-API-Version": f"volume {render.format_microversion(CINDER_MAX)}"})
        raise _Reply(200, body)

    def _volume_types(self, query: dict[str, list[str]]) -> None:
        """Cinder's volume types, one per name the volumes use (ids derived from the names)."""
        fake = self.fake
        self._authorised("volume")
        self._context["resource_type"] = None  # not a listing of resources
        names = sorted({str(r.size["volume_type"]) for r in fake.view.records(fake.cloud, "volume", fake.now())
                        if r.size.get("volume_type")})
        types: list[dict[str, Any]] = [{"id": render.volume_type_id(name), "name": name, "description": None, "is_public": True,
                  "os-volume-type-access:is_public": True, "extra_specs": {}} for name in names]
        raise _Reply(200, {"volume_types": types})

    def _images(self, query: dict[str, list[str]]) -> None:
        fake = self.fake
        token = self._authorised("image")
        empty = self._apply_fault("image", "images")
        hidden_only = (_one(query, "os_hidden") or "false").lower() == "true"
        records = [] if empty or hidden_only else fake.present(fake.view.records(fake.cloud, "image", fake.now()))
        records = self._visible("image", records, token, True)
        page, next_marker, limit = _page(records, query, SERVICES["image"], "image")
        fake.count_page("image")
        body: dict[str, Any] = {"images": [fake.patched(self._image_json(r)) for r in page],
                                "schema": "/v2/schemas/images",
                                "first": "/v2/images"}
        if next_marker is not None:
            # Glance's next link is relative to the endpoint's root and keeps the other filters.
            body["next"] = _next_href("/v2/images", query, limit, next_marker)
        raise _Reply(200, body)


    def _image_json(self, record: PlatformRecord) -> dict[str, Any]:
        body = render.image_json(record)
        if self.fake.is_public(record.resource_id):
            body["visibility"] = "public"
        return body


class _Hang(Exception):
    """Answer nothing until the client gives up or the server stops."""


class _Malformed(Exception):
    def __init__(self, body: bytes):
        super().__init__("malformed")
        self.body = body


def _fault_body(resource_type: str, code: int, message: str) -> dict[str, Any]:
    if resource_type == "instance":
        named = {400: "badRequest", 403: "forbidden", 406: "notAcceptable"}
        key = "computeFault" if code >= 500 else named.get(code, "error")
        return {key: {"code": code, "message": message}}
    if resource_type == "floating_ip":
        names = {400: "HTTPBadRequest", 404: "HTTPNotFound", 503: "HTTPServiceUnavailable"}
        kind = names.get(code, "HTTPInternalServerError")
        return {"NeutronError": {"type": kind, "message": message, "detail": ""}}
    if resource_type == "volume":
        return {"computeFault" if code >= 500 else "badRequest": {"code": code, "message": message}}
    return {"code": code, "title": "Error", "description": message, "faultstring": message}


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[-1] if values else None


def _flag(query: dict[str, list[str]], key: str) -> bool:
    value = _one(query, key)
    return value is not None and value.strip().lower() not in ("0", "false", "no", "off")


def _parse_time(text: str) -> datetime:
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _order(records: list[PlatformRecord]) -> list[PlatformRecord]:
    """Newest first, ties by id: the default order of nova, cinder, glance and octavia."""
    return sorted(records, key=lambda r: (r.created_at, r.resource_id), reverse=True)


def _page(records: list[PlatformRecord], query: dict[str, list[str]], spec: Service, resource_type: str,
          also_known: Sequence[PlatformRecord] = ()) -> tuple[list[PlatformRecord], str | None, int | None]:
    """One page after ``marker``: the items, the marker for a next link (or None), the page size.

    A marker not among ``records`` but among ``also_known`` (nova: deleted servers) pages on from
    where it would sort; any other unknown marker is refused, as the services refuse it.
    """
    limit_text = _one(query, "limit")
    try:
        limit = int(limit_text) if limit_text is not None else spec.default_limit
    except ValueError:
        raise _Reply(400, _fault_body(resource_type, 400, f"limit {limit_text!r} is not an integer")) from None
    if limit is not None and limit < 0:
        raise _Reply(400, _fault_body(resource_type, 400, "limit must be >= 0"))
    if spec.max_limit is not None and (limit is None or limit > spec.max_limit):
        limit = spec.max_limit
    ordered = _order(records)
    start = 0
    marker = _one(query, "marker")
    if marker is not None:
        position = next((i for i, r in enumerate(ordered) if r.resource_id == marker), None)
        if position is None:
            gone = next((r for r in also_known if r.resource_id == marker), None)
            if gone is None:
                raise _Reply(400 if resource_type != "floating_ip" else 404,
                             _fault_body(resource_type, 400, f"marker [{marker}] not found"))
            key = (gone.created_at, gone.resource_id)
            position = sum(1 for r in ordered if (r.created_at, r.resource_id) > key) - 1
        start = position + 1
    if limit is None:
        return ordered[start:], None, None
    page = ordered[start:start + limit]
    if resource_type == "floating_ip":
        # neutron looks one item ahead and links a next page only when one exists
        more = start + limit < len(ordered)
    else:
        more = bool(page) and len(page) == limit
    return page, (page[-1].resource_id if more else None), limit


def _next_href(base: str, query: dict[str, list[str]], limit: int | None, marker: str) -> str:
    params = [(k, v) for k, values in query.items() if k not in ("limit", "marker") for v in values]
    if limit is not None:
        params.append(("limit", str(limit)))
    params.append(("marker", marker))
    return f"{base}?{urllib.parse.urlencode(params)}"
