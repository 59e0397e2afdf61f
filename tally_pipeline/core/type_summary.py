"""What one reconciliation run did for one resource type: the ``per_type`` entries of ``sync_runs``.

Written by the run, stored as JSON in ``sync_runs.per_type`` and read back by the alerts, the CLI and
the Dagster metadata: one type for all of them, so a field cannot be misspelled in one reader.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

#: What differs between two answers of the same failure: the request id each service call carried.
_REQUEST_ID = re.compile(r"\s*\(Request-ID: (req-[0-9A-Za-z-]+)\)")


def cause_of(reason: str | None) -> tuple[str | None, list[str]]:
    """A failed type's reason without its request ids, and those ids: two types refused by the identity service
    for the same reason have the same cause and differ only by the request ids."""
    if reason is None:
        return None, []
    return _REQUEST_ID.sub("", reason), _REQUEST_ID.findall(reason)


def grouped_causes(reasons: dict[str, str | None]) -> list[str]:
    """One ``"type, type: cause (Request-ID: …)"`` per distinct cause, types sorted, causes in the order of
    their first type: a platform that refuses every listing for one cause says so once, not per type."""
    by_cause: dict[str | None, tuple[list[str], list[str]]] = {}
    for rtype in sorted(reasons):
        cause, ids = cause_of(reasons[rtype])
        types, all_ids = by_cause.setdefault(cause, ([], []))
        types.append(rtype)
        all_ids.extend(ids)
    return [f"{', '.join(types)}: {cause}" + (f" (Request-ID: {', '.join(ids)})" if ids else "")
            for cause, (types, ids) in by_cause.items()]


@dataclass
class TypeSummary:
    status: Literal["enumerated", "failed"]
    listed: int = 0
    reason: str | None = None
    live_before: int = 0
    poll_time: str | None = None  # RFC 3339, as stored
    created: int = 0
    updated: int = 0
    deleted: int = 0
    recovered: int = 0
    corrections: int = 0
    deferred: int = 0
    deferred_by_reason: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # listed but unreadable, by reason
    guard_tripped: bool = False
    code: str | None = None  # a failed type's code (``insufficient_scope``, ``run_time_bound``, ...)
    never_ran: dict[str, int] = field(default_factory=dict)  # failed builds not billed, by why
    stuck_transition: int = 0
    restarts: int = 0
    #: What dated each stored status or size correction (``sync.update``): ``action`` (the platform's recorded
    #: actions), ``updated`` (the platform's last change), ``poll`` (nothing better known).
    dated_by: dict[str, int] = field(default_factory=dict)
    #: Lifecycles opened on a size not known before a resize (nothing kept says the older one).
    size_unknown: int = 0
    #: Resources whose platform record of actions was asked for (a server's recorded actions), and
    #: those not asked for because the run's bound on them was reached.
    actions_asked: int = 0
    actions_not_asked: int = 0
    #: corrections of resources whose collector events arrived after the previous sync started yet
    #: occurred before its poll (a landing backlog, a delayed buffer): settled, not drift
    late: int = 0

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    @property
    def lifecycle_corrections(self) -> int:
        """Resources the listing found created, deleted or created-and-deleted (recovered) behind the
        events' back: each is a lifecycle notification the collector never stored."""
        return self.created + self.deleted + self.recovered

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TypeSummary:
        """Read a stored entry; keys an older run did not write take their defaults, unknown keys are dropped."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def summaries_from_json(data: dict[str, Any] | None) -> dict[str, TypeSummary]:
    return {rtype: TypeSummary.from_json(entry) for rtype, entry in (data or {}).items()}
