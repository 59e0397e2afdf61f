"""Which credentials may delete by absence: a listing must provably cover every project.

A delete by absence reads "missing from the listing" as "gone". That holds only when the listing
shows every project's resources. Upstream services differ in what they do with a caller who may
not see everything (checked against their default policies and API code):

============  ==========================================================  ===========================
type          what a caller without the all-projects policy gets           who sees every project
============  ==========================================================  ===========================
instance      nova refuses ``all_tenants`` with 403                        whoever nova's policy
              (``os_compute_api:servers:detail:get_all_tenants``)          allows: nova decides
volume        cinder silently lists the caller's own project               ``admin``
              (``context.is_admin`` gates ``all_tenants``)
floating_ip   neutron silently lists what the caller may see (its own      ``admin``
              project's addresses)
image         glance silently lists what the caller may see (own,          ``admin``
              public, community, shared)
load_balancer octavia silently lists the caller's own project              ``admin``,
              (``load-balancer:read-global``)                              ``load-balancer_admin``,
                                                                           ``load-balancer_global_observer``
============  ==========================================================  ===========================

So for every type but ``instance`` the proof is a role in the token (keystone writes the implied
roles into it too, so ``admin`` is there for an admin). A deployment whose policy files grant
the all-projects listing to another role declares that role per type (``extra_roles``). A
system-scoped token proves nothing here: the current releases of these services check project
scope for these listings, and cinder, octavia and neutron answer a token without a project with
an empty or refused listing rather than with everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tally_pipeline.core.platform import INSUFFICIENT_SCOPE, ListingScope
from tally_pipeline.providers.openstack import TYPES

#: The nova policy that lets a caller list every project's servers.
NOVA_ALL_TENANTS_POLICY = "os_compute_api:servers:detail:get_all_tenants"


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a token says about its holder: roles (implied ones included) and scope."""

    user: str | None
    project_id: str | None
    project_name: str | None
    roles: frozenset[str]
    system_scope: bool = False


def listing_scope(resource_type: str, creds: Credentials,
                  extra_roles: Mapping[str, Iterable[str]] | None = None) -> ListingScope:
    """Whether ``creds`` list every project's resources of ``resource_type``, with why."""
    known = TYPES.get(resource_type)
    service = known.service if known is not None else resource_type
    own = creds.project_id
    if known is not None and known.all_projects_roles is None:
        return ListingScope(True, f"{service} refuses an all-projects listing it does not allow (403, policy "
                                  f"{NOVA_ALL_TENANTS_POLICY}), so an answer covers every project", own)
    if creds.system_scope or own is None:
        return ListingScope(False, f"{INSUFFICIENT_SCOPE}: a system-scoped token; {service} lists "
                                   "every project only for a project-scoped admin")
    roles_of_type = known.all_projects_roles if known is not None else None
    allowed = (roles_of_type or frozenset({"admin"})) | frozenset((extra_roles or {}).get(resource_type, ()))
    held = sorted(allowed & creds.roles)
    if held:
        return ListingScope(True, f"role {held[0]} lists every project in {service}", own)
    roles = ", ".join(sorted(creds.roles)) or "none"
    narrows = known.narrows if known is not None and known.narrows else service + " narrows the listing"
    return ListingScope(False, f"{INSUFFICIENT_SCOPE}: {narrows} "
                               f"without one of the roles {', '.join(sorted(allowed))} (the token has: {roles})")
