"""How nova's instance actions date reconciliation's corrections (``core.reconcile.Dating``).

Pure: the adapter reads the actions (``OpenStackAdapter.instance_actions``), ``actions`` holds the
rules of what each action does; this turns them into dated corrections.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from tally_pipeline.core.reconcile import Basis, Correction, KeptUpdate, older_size
from tally_pipeline.providers.openstack import actions as nova_actions
from tally_pipeline.providers.openstack.actions import InstanceAction


def _said(d: nova_actions.Dated) -> str:
    if d.by == "action":
        return f"; dated by nova's {d.action} action {d.request_id}"
    return "; dated by the platform's updated" if d.by == "updated" else "; dated at the poll"


def _dated_update(c: Correction, b: Basis, found: Sequence[InstanceAction] | None, poll: datetime
                  ) -> list[Correction]:
    done = found or ()
    if c.project_id != b.prior_project:  # a project change has no action of its own: at the poll
        return [dataclasses.replace(c, basis=None, dated_by="poll")]
    status = (nova_actions.date_status(done, c.status, observed=b.observed, updated=b.updated, poll=poll)
              if b.status_differs else None)
    flavor = (nova_actions.date_flavor(done, observed=b.observed, updated=b.updated, poll=poll)
              if b.size_differs else None)
    if status is None or flavor is None or status.at == flavor.at:
        d = status if flavor is None or (status is not None and status.by == "action") else flavor
        assert d is not None
        return [dataclasses.replace(c, occurred_at=d.at, dated_by=d.by, why=c.why + _said(d), basis=None)]
    # changed apart (a resize, then a stop): the earlier change first, the other after it
    first_is_status = status.at < flavor.at
    first, second = (status, flavor) if first_is_status else (flavor, status)
    early = dataclasses.replace(c, occurred_at=first.at, dated_by=first.by, why=c.why + _said(first), basis=None,
                                size=b.prior_size if first_is_status else c.size,
                                status=c.status if first_is_status else b.prior_status)
    late = dataclasses.replace(c, occurred_at=second.at, dated_by=second.by, why=c.why + _said(second),
                               basis=None, step=1)
    return [early, late]


def _past(c: Correction, b: Basis, found: Sequence[InstanceAction], kept: Sequence[KeptUpdate], poll: datetime
          ) -> list[Correction]:
    """A lifecycle opened for an instance, with its past as nova's actions tell it."""
    resizes = [a.done_at for a in found if a.action in nova_actions.FLAVOR_ACTIONS and not a.failed]
    launched = nova_actions.launch(found, c.occurred_at)
    older, _ = older_size(kept, launched, min(resizes)) if resizes and kept else (None, False)
    past = nova_actions.history(found, launched_at=c.occurred_at, shown=c.status, size=c.size or {},
                                size_before=older, updated=b.updated, poll=poll)
    why = c.why + ("; its past from nova's instance actions" if past.steps or past.start != c.occurred_at else "")
    if past.size_unknown:
        why += "; resized before, the flavor before unknown: the listed one"
    out = [dataclasses.replace(
        c, occurred_at=past.start, size=past.size, status=past.status, why=why, basis=None,
        size_unknown=past.size_unknown,
        requested_at=c.requested_at if c.requested_at is not None and c.requested_at < past.start else None)]
    for n, step in enumerate(past.steps, start=1):
        out.append(Correction("update", c.resource_type, c.resource_id, step.at, c.project_id, step.size,
                              "earlier history" + _said(step.dated), status=step.status, dated_by=step.dated.by,
                              step=n))
    return out




class ActionDating:
    """``core.reconcile.Dating`` by nova's instance actions."""

    def date_update(self, c: Correction, basis: Basis, record: Sequence[InstanceAction], poll: datetime
                    ) -> list[Correction]:
        return _dated_update(c, basis, record, poll)

    def with_past(self, c: Correction, basis: Basis, record: Sequence[InstanceAction], kept: Sequence[KeptUpdate],
                  poll: datetime) -> list[Correction]:
        return _past(c, basis, record, kept, poll)


ACTION_DATING = ActionDating()
