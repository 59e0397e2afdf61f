"""The fake OpenStack's vocabulary, shared by its control side (``openstack``) and its HTTP side
(``openstack_http``): services and their paging limits, users, tokens, faults, recorded requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tally_pipeline.schemas import default_registry

FaultKind = Literal["error", "unavailable", "timeout", "malformed", "absent", "throttled", "hold"]
#: The packaged resource types, in the registry's order.
RESOURCE_TYPES = default_registry().in_order
CINDER_MAX = (3, 71)
DOMAIN = {"id": "default", "name": "Default"}


@dataclass(frozen=True)
class Service:
    service_type: str
    name: str
    prefix: str
    default_limit: int | None  # page size when the client sends no limit (None: everything)
    max_limit: int | None


#: Per type, the roles the service's default policy lets see every project (nova:
#: ``os_compute_api:servers:detail:get_all_tenants``; cinder and glance: ``context_is_admin``;
#: neutron: admin; octavia: ``load-balancer:read-global``). ``FakeOpenStack.grant`` adds roles,
#: as a deployment's policy file would.
ALL_PROJECTS_POLICY: dict[str, frozenset[str]] = {
    "instance": frozenset({"admin"}),
    "volume": frozenset({"admin"}),
    "floating_ip": frozenset({"admin"}),
    "image": frozenset({"admin"}),
    "load_balancer": frozenset({"admin", "load-balancer_admin", "load-balancer_global_observer"}),
}

SERVICES: dict[str, Service] = {
    "instance": Service("compute", "nova", "/compute", 1000, 1000),
    "volume": Service("volumev3", "cinderv3", "/volume", 1000, 1000),
    "floating_ip": Service("network", "neutron", "/network", None, None),
    "image": Service("image", "glance", "/image", 25, 1000),
    "load_balancer": Service("load-balancer", "octavia", "/load-balancer", 1000, 1000),
}


@dataclass
class Fault:
    """A fault on one resource type's list endpoint.

    ``after_pages`` lets that many list requests succeed first (a failure mid-listing);
    ``times`` bounds how often it fires (None: until cleared). ``absent`` drops the service from
    the catalog of tokens issued from then on.
    """

    kind: FaultKind
    after_pages: int = 0
    times: int | None = None
    seen: int = 0
    fired: int = 0
    retry_after: str | None = None  # ``throttled``: the Retry-After header sent with the 429

    def fires(self) -> bool:
        self.seen += 1
        if self.seen <= self.after_pages or (self.times is not None and self.fired >= self.times):
            return False
        self.fired += 1
        return True


@dataclass(frozen=True)
class User:
    name: str
    password: str
    project_id: str
    project_name: str
    roles: tuple[str, ...]

    @property
    def admin(self) -> bool:
        return "admin" in self.roles


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake answered: enough for tests to check what the client really sent."""

    method: str
    path: str
    query: dict[str, list[str]]
    resource_type: str | None  # set on list and show requests
    microversion_header: str | None  # OpenStack-API-Version or X-OpenStack-Nova-API-Version as sent
    microversion: str | None  # the microversion the fake answered with (nova, cinder)
    status: int
    show: bool = False  # a GET by id, not a listing


@dataclass
class Token:
    user: User
    services: frozenset[str]  # resource types whose service was in the catalog at issue time
