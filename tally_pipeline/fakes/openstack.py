"""A fake OpenStack over real HTTP, for driving the real openstacksdk in tests and benchmarks.

One loopback server plays keystone v3 (password auth, token, service catalog) and the five list
APIs the adapter reads, each under its own path prefix and paging the way that service pages:

==============  ==================  ===========================================================
service type    prefix              list endpoint (paging)
==============  ==================  ===========================================================
identity        ``/identity``       ``POST /v3/auth/tokens``
compute         ``/compute``        ``GET /v2.1/servers/detail`` (``servers_links`` on a full page)
volumev3        ``/volume``         ``GET /v3/{project}/volumes/detail`` (``volumes_links``)
network         ``/network``        ``GET /v2.0/floatingips`` (``floatingips_links`` while more exist)
image           ``/image``          ``GET /v2/images`` (top-level ``next``; default page 25)
load-balancer   ``/load-balancer``  ``GET /v2.0/lbaas/loadbalancers`` (``loadbalancers_links``)
==============  ==================  ===========================================================

Nova's usage API, ``GET /v2.1/os-simple-tenant-usage`` (all projects, admin) and
``/os-simple-tenant-usage/{project}``, is computed from the same servers as nova computes it and pages
as nova pages it (``openstack_usage``).

Each type also answers GET by id (``/servers/{id}``, ``/volumes/{id}``, ``/floatingips/{id}``,
``/images/{id}``, ``/lbaas/loadbalancers/{id}``): 200 with the record while the platform holds
it, 404 once it is gone; a soft-deleted server (status ``SOFT_DELETED`` among the view's deleted
servers) answers 200 and shows in nova's ``deleted=true`` listing, not in the live one.

Down cells (``cell_down``): as nova with ``list_records_by_skipping_down_cells = True``, those
servers are left out of every listing carrying a limit, marker, sort or filter (other than
``all_tenants``); an unpaged, unfiltered listing at microversion 2.69+ shows them as minimal
``UNKNOWN`` records; GET by id answers the minimal record (2.69+) or 503.

What it lists comes from any ``PlatformView`` at the instant its clock gives, so the simulator's
ground truth plugs in unchanged; every answer's ``Date`` header is that clock's. Faults are injected
per resource type, on its listing or on its GET by id (see ``inject``); ``patch`` rewrites fields
of one record as rendered (a glance image with a null owner, a floating IP without timestamps).

Roles decide scope as the services' default policies do (``ALL_PROJECTS_POLICY``): ``admin`` sees
every project everywhere and nova's deleted servers; octavia also lets ``load-balancer_admin`` and
``load-balancer_global_observer`` see every project. Anyone else gets what upstream gives a
project-scoped caller: nova answers ``all_tenants`` with 403; cinder and octavia silently list the
token's own project; neutron lists the project's own floating IPs; glance lists the project's own
images and the public ones (``publish``); a GET by id of another project's resource is a 404; nova
silently ignores ``deleted`` (and any admin-only filter). ``grant(type, role)`` plays a deployment
whose policy file lets another role list every project of a type.

Listings also move under the client's feet: ``vanish(id, after_pages=n)`` deletes a resource once
its type has answered n pages (nova finds a deleted marker, as real nova does until the row is
archived; the other services refuse the next page: 400, neutron 404). ``inject(type, "throttled",
retry_after="3600")`` answers 429 with that ``Retry-After`` header; ``inject(type, "hold")`` holds
requests until ``release_held()``.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any, Literal

from tally_pipeline.fakes import openstack_json as render
from tally_pipeline.fakes.openstack_model import (
    ALL_PROJECTS_POLICY,
    CINDER_MAX,
    DOMAIN,
    RESOURCE_TYPES,
    SERVICES,
    Fault,
    FaultKind,
    RecordedRequest,
    Service,
    Token,
    User,
)
from tally_pipeline.providers.simulated.platform import FailureMode, PlatformRecord, PlatformView

__all__ = ["CINDER_MAX", "FakeAction", "DOMAIN", "RESOURCE_TYPES", "SERVICES", "FakeOpenStack", "Fault", "FaultKind",
           "RecordedRequest", "Service", "Token", "User"]

#: The event nova's compute manager records for an action, where it is not ``compute_<action>_instance``.
_EVENT_NAMES = {"create": "compute__do_build_and_run_instance", "resize": "compute_finish_resize",
                "confirmResize": "compute_confirm_resize", "revertResize": "compute_finish_revert_resize",
                "shelveOffload": "compute_shelve_offload_instance", "start": "compute_start_instance"}


@dataclass(frozen=True)
class FakeAction:
    """One instance action: its request, name, request time, events (name, start, finish) and outcome."""

    request_id: str
    action: str
    start: datetime
    events: tuple[tuple[str, datetime, datetime | None], ...]
    failed: bool = False


class FakeOpenStack:
    """A fake OpenStack cloud on ``127.0.0.1:<port>`` (a free one by default), backed by a ``PlatformView``.

    Use as a context manager (or ``start()``/``stop()``). ``auth_url`` is the keystone endpoint;
    ``auth()`` and ``clouds_yaml_entry()`` give ready-made client settings.
    """

    def __init__(
        self,
        view: PlatformView,
        *,
        cloud: str = "fake",
        at: datetime | None = None,
        clock: Callable[[], datetime] | None = None,
        nova_max_microversion: str = "2.96",
        region: str = "RegionOne",
        hang_limit: float = 30.0,
        port: int = 0,
    ):
        self.view = view
        self.requested_port = port  # 0: a free port
        self.cloud = cloud
        self.region = region
        self.hang_limit = hang_limit
        self.nova_max = render.parse_microversion(nova_max_microversion)
        self._clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        if at is not None:
            self.set_time(at)
        self._faults: dict[str, Fault] = {}
        self._show_faults: dict[str, Fault] = {}
        self._down_cell: set[str] = set()
        self._patches: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {}
        self._users: dict[str, User] = {}
        self._tokens: dict[str, Token] = {}
        self._policy: dict[str, set[str]] = {t: set(roles) for t, roles in ALL_PROJECTS_POLICY.items()}
        self._public: set[str] = set()
        self._vanishing: dict[str, tuple[str, int]] = {}  # id -> (type, pages after which it is gone)
        self._vanished: dict[str, datetime] = {}  # id -> when it was deleted
        self._actions: dict[str, list[FakeAction]] = {}  # server id -> its recorded instance actions
        self._pages: dict[str, int] = {}  # list pages answered per type
        self.usage_pages = 0  # pages of os-simple-tenant-usage answered
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.add_user("admin", "secret", project_name="admin", roles=("admin",))

    # --- control ---------------------------------------------------------------------------

    def set_time(self, at: datetime) -> None:
        """Answer every later request as of ``at`` (an aware datetime)."""
        fixed = at if at.tzinfo else at.replace(tzinfo=UTC)
        self._clock = lambda: fixed

    def now(self) -> datetime:
        return self._clock()

    def add_user(
        self, name: str, password: str, *, project_name: str, roles: tuple[str, ...] = ("member",),
        project_id: str | None = None,
    ) -> User:
        user = User(name, password, project_id or render.stable_id("project", project_name), project_name, tuple(roles))
        with self._lock:
            self._users[name] = user
        return user

    def user(self, name: str) -> User:
        return self._users[name]

    def inject(self, resource_type: str, kind: FaultKind, *, after_pages: int = 0, times: int | None = None,
               on: Literal["list", "show"] = "list", retry_after: str | None = None) -> Fault:
        """Make ``resource_type``'s list endpoint (or, ``on="show"``, its GET by id) fail: ``error``
        (HTTP 500), ``unavailable`` (HTTP 503, which clients retry), ``timeout`` (hang until the
        client gives up or the server stops), ``malformed`` (a truncated JSON page), ``absent``
        (not in the catalog), ``throttled`` (HTTP 429 with ``Retry-After: retry_after``), ``hold``
        (wait until ``release_held()`` or the server stops, then answer normally)."""
        if resource_type not in SERVICES:
            raise ValueError(f"unknown resource type {resource_type!r}")
        fault = Fault(kind, after_pages, times, retry_after=retry_after)
        if kind == "hold":
            self._released.clear()  # a new hold holds, whatever an earlier release let go
        with self._lock:
            (self._show_faults if on == "show" else self._faults)[resource_type] = fault
        return fault

    def release_held(self) -> None:
        """Let every ``hold``-ing request (and any later one) go on."""
        self._released.set()

    def grant(self, resource_type: str, role: str) -> None:
        """Let ``role`` list every project of ``resource_type`` (a deployment's policy override)."""
        with self._lock:
            self._policy[resource_type].add(role)

    def sees_all(self, user: User, resource_type: str) -> bool:
        with self._lock:
            return bool(self._policy[resource_type] & set(user.roles))

    def publish(self, *image_ids: str) -> None:
        """Make these glance images public: every project lists them and may GET them."""
        with self._lock:
            self._public.update(image_ids)

    def is_public(self, image_id: str) -> bool:
        with self._lock:
            return image_id in self._public

    def vanish(self, resource_id: str, resource_type: str, *, after_pages: int = 1) -> None:
        """Delete the resource once its type's listing has answered ``after_pages`` more pages."""
        with self._lock:
            self._vanishing[resource_id] = (resource_type, self._pages.get(resource_type, 0) + after_pages)

    def count_page(self, resource_type: str) -> None:
        """One more list page answered for the type; resources due to vanish now are gone."""
        with self._lock:
            self._pages[resource_type] = pages = self._pages.get(resource_type, 0) + 1
            for rid, (rtype, after) in list(self._vanishing.items()):
                if rtype == resource_type and pages >= after:
                    del self._vanishing[rid]
                    self._vanished[rid] = self._clock()

    def count_usage_page(self) -> None:
        """One more page of nova's usage API answered (``usage_pages``)."""
        with self._lock:
            self.usage_pages += 1

    def present(self, records: list[PlatformRecord]) -> list[PlatformRecord]:
        """``records`` without the ones that vanished."""
        with self._lock:
            gone = set(self._vanished)
        return [r for r in records if r.resource_id not in gone] if gone else records

    def vanished_servers(self) -> list[PlatformRecord]:
        """Servers that vanished, as nova's deleted listing shows them (``DELETED``)."""
        with self._lock:
            gone = dict(self._vanished)
        if not gone:
            return []
        out = []
        for record in self.view.records(self.cloud, "instance", self.now()):
            when = gone.get(record.resource_id)
            if when is not None:
                out.append(replace(record, status="DELETED", task_state=None, updated_at=when, deleted_at=when))
        return out

    def act(self, server_id: str, action: str, *, at: datetime, finish: datetime | None = None,
            events: tuple[str, ...] | None = None, failed: bool = False, request_id: str | None = None) -> str:
        """Record an instance action on a server as nova does (``os-instance-actions``): requested at
        ``at``, its events (default: one, ``compute_<action>_instance``) started at ``at`` and
        finished at ``finish`` (None: still running); ``failed`` gives the action's message and its
        last event's result ``Error``. Returns the request id. Nova records a ``create`` for every
        server itself: the fake shows one from the record (requested at ``created``, built by
        ``launched_at``) unless a test records its own."""
        rid = request_id or "req-" + secrets.token_hex(16)
        names = events if events is not None else (_EVENT_NAMES.get(action, f"compute_{action.lower()}_instance"),)
        with self._lock:
            self._actions.setdefault(server_id, []).append(
                FakeAction(rid, action, at, tuple((n, at, finish) for n in names), failed))
        return rid

    def actions_of(self, server_id: str) -> list[FakeAction] | None:
        """The server's actions, oldest first, the implicit ``create`` included; None for a server
        nova does not know (neither live nor in its deleted listing)."""
        at = self.now()
        record = next((r for r in self.view.records(self.cloud, "instance", at) if r.resource_id == server_id), None)
        if record is None:
            gone = self.view.deleted_servers(self.cloud, datetime(1970, 1, 1, tzinfo=UTC), at)
            record = next((r for r in gone if r.resource_id == server_id), None)
        with self._lock:
            recorded = list(self._actions.get(server_id, ()))
        if record is None and not recorded:
            return None
        if record is not None and not any(a.action == "create" for a in recorded):
            built = record.launched_at or record.created_at
            recorded.insert(0, FakeAction("req-create-" + server_id, "create", record.created_at,
                                          (("compute__do_build_and_run_instance", record.created_at, built),), False))
        return sorted(recorded, key=lambda a: a.start)

    def action_requests(self) -> list[RecordedRequest]:
        """The requests answered for instance actions (listings and details)."""
        return [r for r in self.requests if "/os-instance-actions" in r.path]

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._show_faults.clear()

    def cell_down(self, *server_ids: str) -> None:
        """Put these servers in a nova cell that cannot be reached (see the module's docstring)."""
        with self._lock:
            self._down_cell.update(server_ids)

    def cell_up(self) -> None:
        with self._lock:
            self._down_cell.clear()

    def down_cell_ids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._down_cell)

    def in_down_cell(self, server_id: str) -> bool:
        with self._lock:
            return server_id in self._down_cell

    def patch(self, resource_id: str, *, drop: tuple[str, ...] = (), **fields: Any) -> None:
        """Render one record with ``fields`` replaced (``None`` gives JSON null) and ``drop`` left out."""
        with self._lock:
            self._patches[resource_id] = (dict(fields), tuple(drop))

    def patched(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            found = self._patches.get(str(body.get("id")))
        if found is None:
            return body
        fields, drop = found
        out = {k: v for k, v in body.items() if k not in drop}
        out.update(fields)
        return out

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def list_requests(self, resource_type: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.resource_type == resource_type and not r.show]

    def show_requests(self, resource_type: str) -> list[RecordedRequest]:
        """The GET-by-id requests answered for the type (the adapter's confirmations)."""
        return [r for r in self.requests if r.resource_type == resource_type and r.show]

    def wait_for(self, predicate: Callable[[RecordedRequest], bool], timeout: float = 10.0) -> RecordedRequest | None:
        """Block until a request matching ``predicate`` has been received (hanging ones included,
        with status 0); None after ``timeout`` seconds."""
        found: list[RecordedRequest] = []

        def matched() -> bool:
            found[:] = [r for r in self._requests if predicate(r)][:1]
            return bool(found)

        with self._recorded:
            self._recorded.wait_for(matched, timeout)
        return found[0] if found else None

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake OpenStack is not running")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/identity"

    def auth(self, user: str = "admin") -> dict[str, Any]:
        """Inline password-auth settings for ``user`` (the shape of a clouds.yaml ``auth`` block)."""
        u = self._users[user]
        return {
            "auth_url": self.auth_url,
            "username": u.name,
            "password": u.password,
            "project_name": u.project_name,
            "user_domain_name": DOMAIN["name"],
            "project_domain_name": DOMAIN["name"],
        }

    def clouds_yaml_entry(self, user: str = "admin") -> dict[str, Any]:
        """One ``clouds:`` entry of a clouds.yaml pointing at this server."""
        return {"auth": self.auth(user), "auth_type": "password", "region_name": self.region, "identity_api_version": 3}

    def tally_cloud_entry(self, user: str = "admin", **overrides: Any) -> dict[str, Any]:
        """A ``clouds:`` entry of *our* config file (``provider: openstack``) pointing at this server,
        with short timeouts for tests; ``overrides`` replace any key (e.g. ``page_size``)."""
        return {"provider": "openstack", "auth": self.auth(user), "auth_type": "password",
                "region_name": self.region, "timeout": 5, "retries": 1, "retry_delay": 0.05, **overrides}

    def start(self) -> FakeOpenStack:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._released.clear()
        from tally_pipeline.fakes.openstack_http import FakeServer, Handler

        httpd = FakeServer(("127.0.0.1", self.requested_port), Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openstack", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: hanging requests end, open connections close, threads are joined."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        self._released.set()
        httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> FakeOpenStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals used by the handler -----------------------------------------------------

    def _track(self, conn: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _record(self, request: RecordedRequest) -> None:
        with self._recorded:
            self._requests.append(request)
            self._recorded.notify_all()

    def _fault_for(self, resource_type: str, *, show: bool = False) -> Fault | FailureMode | None:
        """The injected fault that fires for this request (a ``Fault``), else the view's own mode."""
        with self._lock:
            fault = (self._show_faults if show else self._faults).get(resource_type)
            if fault is not None and fault.kind != "absent" and fault.fires():
                return fault
        return None if show else self.view.failure(self.cloud, resource_type)

    def _catalog_types(self) -> frozenset[str]:
        with self._lock:
            absent = {t for t, f in self._faults.items() if f.kind == "absent"}
        return frozenset(t for t in SERVICES if t not in absent)

    def _issue_token(self, user: User) -> tuple[str, Token]:
        token = secrets.token_hex(16)
        issued = Token(user, self._catalog_types())
        with self._lock:
            self._tokens[token] = issued
        return token, issued

    def _token(self, value: str | None) -> Token | None:
        if not value:
            return None
        with self._lock:
            return self._tokens.get(value)

    def _check_password(self, auth: dict[str, Any]) -> User | None:
        try:
            identity = auth["identity"]
            user_spec = identity["password"]["user"]
        except (KeyError, TypeError):
            return None
        if "password" not in identity.get("methods", []):
            return None
        with self._lock:
            users = list(self._users.values())
        name, user_id = user_spec.get("name"), user_spec.get("id")
        for user in users:
            if name == user.name or (name is None and user_id == render.stable_id("user", user.name)):
                given = str(user_spec.get("password", ""))
                return user if secrets.compare_digest(given.encode(), user.password.encode()) else None
        return None
