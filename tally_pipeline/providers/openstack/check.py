"""What a cloud's credentials can see, per type, and whether reconciliation may delete by absence.

``check(adapter)`` asks keystone who the token is, applies the scope rules (``core.scope``) and reads
the first items of each type's listing (at most ``sample`` of them) and nova's deleted listing, so
an operator sees before the first run what reconciliation will do with these credentials.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tally_pipeline.providers.interface import AdapterError, ListedResource
from tally_pipeline.providers.openstack.adapter import SERVICE_OF, OpenStackAdapter
from tally_pipeline.providers.openstack.scope import Credentials


@dataclass
class TypeCheck:
    resource_type: str
    service: str
    all_projects: bool  # the scope rules say the listing covers every project
    scope: str  # why (or why not)
    listed: int | None = None  # items read from the listing's start (None: not read)
    projects: int = 0  # distinct projects among them
    own_project_only: bool = False  # every item read belongs to the token's project
    error: str | None = None  # the listing failed: why

    @property
    def deletes_allowed(self) -> bool:
        """Reconciliation may delete this type by absence: scope proven and the listing answers."""
        return self.all_projects and self.error is None

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "deletes_allowed": self.deletes_allowed}


@dataclass
class CloudCheck:
    cloud: str
    credentials: Credentials | None
    error: str | None = None  # no token at all: why
    types: list[TypeCheck] = field(default_factory=list)
    deleted_listing: str | None = None  # nova's deleted servers: "available" or why not

    def as_json(self) -> dict[str, Any]:
        creds = None if self.credentials is None else {
            "user": self.credentials.user, "project_id": self.credentials.project_id,
            "project_name": self.credentials.project_name, "roles": sorted(self.credentials.roles),
            "system_scope": self.credentials.system_scope}
        return {"cloud": self.cloud, "credentials": creds, "error": self.error, "deleted_listing": self.deleted_listing,
                "types": {t.resource_type: t.as_json() for t in self.types}}


def check(adapter: OpenStackAdapter, *, sample: int = 1000, now: datetime | None = None) -> CloudCheck:
    """Check every type ``adapter`` lists (reads at most ``sample`` items of each)."""
    at = now or datetime.now(UTC)
    try:
        creds = adapter.credentials()
    except AdapterError as exc:  # no token: nothing else can be checked
        return CloudCheck(adapter.cloud, None, error=str(exc))
    out = CloudCheck(adapter.cloud, creds)
    for rtype in adapter.resource_types:
        scope = adapter.listing_scope(rtype)
        item = TypeCheck(rtype, SERVICE_OF.get(rtype, rtype), scope.all_projects, scope.detail)
        out.types.append(item)
        if not scope.all_projects:
            continue  # reconciliation will not list it either
        try:
            listed = [r for r in itertools.islice(adapter.enumerate(rtype, at=at), sample)
                      if isinstance(r, ListedResource)]
        except AdapterError as exc:
            item.error = str(exc)
            item.all_projects = item.all_projects and getattr(exc, "code", None) is None
            continue
        item.listed = len(listed)
        projects = {r.project_id for r in listed}
        item.projects = len(projects)
        item.own_project_only = bool(listed) and projects == {creds.project_id}
    if "instance" in adapter.resource_types:
        deleted = adapter.deleted_since(at - timedelta(minutes=10), at=at)
        out.deleted_listing = "available" if deleted.available else f"unavailable: {deleted.reason}"
    return out
