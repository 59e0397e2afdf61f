"""Nova's instance actions: which action explains which difference, and which instant dates it.

Nova records every action on a server (``GET /servers/{id}/os-instance-actions``): its name
(``create``, ``stop``, ``start``, ``resize``, ``confirmResize``, ``shelve``…), the request's
``start_time``, and events (``compute_stop_instance``, ``compute_finish_resize``…) each with a
``start_time`` and a ``finish_time``. The state change an action makes is saved at the end of its
work on the host, so an action is dated at its last event's ``finish_time`` (``done_at``), else at
its request when it has no finished event.

A difference reconciliation finds (the listing's status or flavor against the projection's) is
dated, in this order of preference (``date``):

1. by the **last action that explains it**: the last successful status-changing (or, for a flavor,
   flavor-changing) action done after the last observation and by the poll, when the status it
   leaves the server in is the one listed (``STATUS_AFTER``; a flavor: ``resize``, ``revertResize``,
   else ``confirmResize``);
2. by the server's ``updated`` (its last change of any kind) when no action explains it and it is
   later than the last observation;
3. by the poll time when the platform knows nothing better.

A lifecycle reconciliation opens has a past too (``history``): it starts at the launch — the
create action's end when an action since reset nova's ``launched_at`` (a resize, an unshelve, a
rebuild) — as ``active``, and each later action moves it as nova does (a stop to ``shutoff``, a
resize to ``verify_resize`` on the new flavor, its confirm back to the status before it…). Nova keeps
its times to the whole second, so "later" includes an action done in the launch's own second (a
server stopped as soon as it booted: its ``active`` interval is then of length 0, and not kept); the
create action is the start itself, never a step. The
flavor before the first resize is not in nova's record: the caller passes it when an event kept in
the history says it (``core/reconcile.py``), else the listed one is used and the step says the
older size is unknown. Pure: the adapter reads the actions, this decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tally_pipeline.core.platform import DatedBy

#: Per action, the statuses (as events carry them: the API's, lower-cased) it may leave a server in.
STATUS_AFTER: dict[str, frozenset[str]] = {
    "create": frozenset({"active"}),
    "start": frozenset({"active"}),
    "reboot": frozenset({"active"}),
    "stop": frozenset({"shutoff"}),
    "suspend": frozenset({"suspended"}),
    "resume": frozenset({"active"}),
    "pause": frozenset({"paused"}),
    "unpause": frozenset({"active"}),
    "rescue": frozenset({"rescue"}),
    "unrescue": frozenset({"active"}),
    # with nova's default shelved_offload_time of 0 a shelve offloads at once, in the same action
    "shelve": frozenset({"shelved", "shelved_offloaded"}),
    "shelveOffload": frozenset({"shelved_offloaded"}),
    "unshelve": frozenset({"active"}),
    "resize": frozenset({"verify_resize"}),
    "migrate": frozenset({"verify_resize"}),
    # a stopped server resized stays stopped once confirmed or reverted
    "confirmResize": frozenset({"active", "shutoff"}),
    "revertResize": frozenset({"active", "shutoff"}),
    "restore": frozenset({"active"}),
    "rebuild": frozenset({"active", "shutoff"}),
    "evacuate": frozenset({"active", "shutoff"}),
}
#: Actions after which the server runs on another flavor than before (a revert: back to the old one).
FLAVOR_ACTIONS = frozenset({"resize", "revertResize"})
#: Explains a flavor difference only when no resize or revert does (the resize itself not recorded).
FLAVOR_FALLBACK = "confirmResize"
#: Actions after which nova stamps ``launched_at`` again (the server is spawned anew): the listing's
#: launch is then not the lifecycle's start, the create action's end is.
LAUNCH_RESETS = frozenset({"resize", "migrate", "revertResize", "unshelve", "rebuild", "evacuate"})
#: The actions reconciliation reads the events of (the others change neither status nor flavor).
RELEVANT = frozenset(STATUS_AFTER) | FLAVOR_ACTIONS | {FLAVOR_FALLBACK}


@dataclass(frozen=True, slots=True)
class ActionEvent:
    """One step of an action on the host, as ``/os-instance-actions/{request_id}`` shows it."""

    name: str
    start_time: datetime | None
    finish_time: datetime | None
    result: str | None = None  # Success, Error; None while it runs


@dataclass(frozen=True, slots=True)
class InstanceAction:
    """One action nova recorded on a server (``request_id``, ``action``, ``start_time``, ``message``)."""

    action: str
    request_id: str
    start_time: datetime
    message: str | None = None
    events: tuple[ActionEvent, ...] = ()

    @property
    def failed(self) -> bool:
        """Nova sets ``message`` (``Error``) on an action that failed, and its event's result."""
        if self.message and self.message.strip().lower() == "error":
            return True
        return any((e.result or "").strip().lower() == "error" for e in self.events)

    @property
    def done_at(self) -> datetime:
        """When the action's change was made: its last event's finish, else its request."""
        finished = [e.finish_time for e in self.events if e.finish_time is not None]
        return max(finished) if finished else self.start_time


@dataclass(frozen=True, slots=True)
class Dated:
    """The instant a difference is dated at, and what said so."""

    at: datetime
    by: DatedBy
    action: str | None = None  # the action's name, when an action dated it
    request_id: str | None = None


def fallback(observed: datetime | None, updated: datetime | None, poll: datetime) -> Dated:
    """No action explains it: the server's ``updated`` when later than the last observation, else the poll."""
    if updated is not None and updated <= poll and (observed is None or updated > observed):
        return Dated(updated, "updated")
    return Dated(poll, "poll")


def _done(actions: Sequence[InstanceAction], names: frozenset[str] | set[str], observed: datetime | None,
          poll: datetime, *, from_observed: bool = False) -> list[InstanceAction]:
    """The successful actions of ``names`` done after ``observed`` (or at it, ``from_observed``) and by
    ``poll``, oldest first."""
    found = [a for a in actions if a.action in names and not a.failed and a.done_at <= poll
             and (observed is None or a.done_at > observed or (from_observed and a.done_at == observed))]
    return sorted(found, key=lambda a: (a.done_at, a.start_time, a.request_id))


def date_status(actions: Sequence[InstanceAction], shown: str | None, *, observed: datetime | None,
                updated: datetime | None, poll: datetime) -> Dated:
    """When the server came to show ``shown``: the last status-changing action after ``observed``,
    if it leaves the server in that status; else ``fallback``."""
    done = _done(actions, set(STATUS_AFTER), observed, poll)
    if done and shown is not None and shown in STATUS_AFTER[done[-1].action]:
        last = done[-1]
        return Dated(last.done_at, "action", last.action, last.request_id)
    return fallback(observed, updated, poll)


def date_flavor(actions: Sequence[InstanceAction], *, observed: datetime | None, updated: datetime | None,
                poll: datetime) -> Dated:
    """When the server came to run on the listed flavor: the last resize (or revert) after
    ``observed``, else a confirm of one, else ``fallback``."""
    done = _done(actions, FLAVOR_ACTIONS, observed, poll) or _done(actions, {FLAVOR_FALLBACK}, observed, poll)
    if done:
        last = done[-1]
        return Dated(last.done_at, "action", last.action, last.request_id)
    return fallback(observed, updated, poll)


@dataclass(frozen=True, slots=True)
class Step:
    """One change of a lifecycle's past: from ``at`` the server shows ``status`` on ``size``."""

    at: datetime
    status: str | None
    size: dict[str, Any]
    dated: Dated


@dataclass(frozen=True, slots=True)
class Past:
    """A lifecycle's start and its changes since, as nova's actions tell them (``history``)."""

    start: datetime
    status: str | None  # the status it started with
    size: dict[str, Any]  # the flavor it started on
    steps: tuple[Step, ...]
    #: It was resized and nothing says the flavor before: the start's flavor is the listed one.
    size_unknown: bool = False


def launch(actions: Sequence[InstanceAction], launched_at: datetime) -> datetime:
    """Where billable life started: nova's ``launched_at``, unless a later action reset it (a resize,
    an unshelve…): then the create action's end, when nova recorded one."""
    creates = [a for a in actions if a.action == "create" and not a.failed]
    if not creates or not any(a.action in LAUNCH_RESETS and not a.failed for a in actions):
        return launched_at
    built = min(a.done_at for a in creates)
    return min(built, launched_at)


def history(actions: Sequence[InstanceAction], *, launched_at: datetime, shown: str | None,
            size: dict[str, Any], size_before: dict[str, Any] | None, updated: datetime | None,
            poll: datetime, whole_seconds: bool = True) -> Past:
    """The past of a server reconciliation first sees: launched as ``active``, each later action
    moving it as nova does, ending as listed (``shown`` on ``size``).

    ``size_before`` is the flavor before the first resize when something kept says it (an event of
    the history); without it a resized server's start is on the listed flavor, ``size_unknown``.
    A status the actions do not end in is reached at ``fallback`` (``updated`` or the poll).
    """
    start = launch(actions, launched_at)
    if whole_seconds:
        start = start.replace(microsecond=0)
    # Nova keeps its times to the whole second: an action done in the launch's second (a server stopped
    # as soon as it booted) is after the launch all the same. The create is the start itself, never a step:
    # its build can be recorded done after a stop that followed the server showing ACTIVE.
    later = _done(actions, RELEVANT - {"create"}, start, poll, from_observed=True)
    resized = any(a.action in FLAVOR_ACTIONS for a in later)
    first_size = size_before if resized and size_before is not None else size
    status: str | None = "active"
    before_resize: str | None = status
    current_size = first_size
    steps: list[Step] = []
    status_actions = [a for a in later if a.action in STATUS_AFTER]
    last_status = status_actions[-1] if status_actions else None
    for action in later:
        name = action.action
        if name in ("resize", "migrate"):
            before_resize = status
        if name in FLAVOR_ACTIONS:
            current_size = size
        new_status = _status_after(name, status, before_resize)
        if action is last_status and shown in STATUS_AFTER[name]:
            new_status = shown  # the last one says which of its statuses (a shelve: offloaded or not)
        if (new_status, current_size) != (status, steps[-1].size if steps else first_size):
            steps.append(Step(action.done_at, new_status, current_size,
                              Dated(action.done_at, "action", name, action.request_id)))
        status = new_status
    last_size = steps[-1].size if steps else first_size
    if status != shown or last_size != size:
        dated = fallback(steps[-1].at if steps else start, updated, poll)
        steps.append(Step(dated.at, shown, size, dated))
    return Past(start, "active", first_size, tuple(steps), size_unknown=resized and size_before is None)


def _status_after(action: str, current: str | None, before_resize: str | None) -> str | None:
    """The status the server shows after ``action``, walking its past (one status per action)."""
    if action in ("confirmResize", "revertResize"):
        return before_resize if before_resize in ("active", "shutoff") else "active"
    if action in ("rebuild", "evacuate"):
        return "shutoff" if current == "shutoff" else "active"
    if action == "shelve":
        return "shelved_offloaded"
    allowed = STATUS_AFTER.get(action)
    if allowed is None or len(allowed) != 1:
        return current
    return next(iter(allowed))
