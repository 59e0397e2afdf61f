"""The platform's view of a simulation: what each service lists at an instant, with injectable faults.

Implements ``PlatformView``. Listings come from the ground truth's status history, so they include
the transitional states around every change (BUILD, RESIZE, ``extending``, ``saving``,
PENDING_*, ACTIVE with task_state ``deleting``). Deleted servers are nova-like: status DELETED with
their real ``deleted_at``, kept only for a retention horizon.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.providers.simulated.platform import FailureMode, PlatformRecord
from tally_pipeline.providers.simulated.spec import FAILURE_MODES
from tally_pipeline.providers.simulated.truth import GroundTruth, Lifecycle


class SimulatedPlatform:
    """A ``PlatformView`` over a ground truth. Faults are per (cloud, type) and switchable at run time."""

    def __init__(self, truth: GroundTruth, *, resource_types: Iterable[str], retention: timedelta = timedelta(hours=24),
                 failing_types: Mapping[str, Mapping[str, FailureMode]] | None = None):
        self.truth = truth
        self.resource_types = tuple(resource_types)
        self.retention = retention
        self._faults: dict[tuple[str, str], FailureMode] = {}
        for cloud, modes in (failing_types or {}).items():
            for resource_type, mode in modes.items():
                self.inject(cloud, resource_type, mode)
        deleted: dict[str, list[Lifecycle]] = {}
        for lc in truth.lifecycles(resource_type="instance"):
            if lc.deleted_at is not None:
                deleted.setdefault(lc.cloud, []).append(lc)
        self._deleted = {
            cloud: (sorted(items, key=lambda lc: (lc.deleted_at, lc.resource_id)))
            for cloud, items in deleted.items()
        }
        self._deleted_times = {cloud: [lc.deleted_at for lc in items if lc.deleted_at is not None]
                               for cloud, items in self._deleted.items()}

    # -- faults ----------------------------------------------------------------------------------

    def inject(self, cloud: str, resource_type: str, mode: FailureMode) -> None:
        """Make the type's listing fail (``error``), hang (``timeout``), wrongly come back ``empty``, or
        (instances) silently miss the servers of a ``down_cell``."""
        if mode not in FAILURE_MODES:
            raise ValueError(f"unknown failure mode {mode!r} (known: {', '.join(sorted(FAILURE_MODES))})")
        if mode == "down_cell" and resource_type != "instance":
            raise ValueError("down_cell is a nova fault: it applies to instances only")
        if resource_type not in self.resource_types:
            raise ValueError(f"{resource_type!r} is not a simulated type")
        self._faults[(cloud, resource_type)] = mode

    def clear(self, cloud: str | None = None, resource_type: str | None = None) -> None:
        """Remove injected faults: one type's, a cloud's, or (no arguments) all."""
        for key in list(self._faults):
            if (cloud is None or key[0] == cloud) and (resource_type is None or key[1] == resource_type):
                del self._faults[key]

    def failure(self, cloud: str, resource_type: str) -> FailureMode | None:
        return self._faults.get((cloud, resource_type))

    # -- listings --------------------------------------------------------------------------------

    def records(self, cloud: str, resource_type: str, at: datetime) -> list[PlatformRecord]:
        """Live resources at ``at`` ordered by (created_at, id), whatever fault is injected (the caller
        applies the fault: the adapter raises, the fake server answers 500)."""
        at = to_utc(at)
        out = []
        for lc in self.truth.alive_at(cloud, resource_type, at):
            phase = lc.phase_at(at)
            interval = lc.interval_at(at)
            assert phase is not None and interval is not None  # alive_at guarantees both
            out.append(PlatformRecord(
                resource_type=resource_type,
                resource_id=lc.resource_id,
                project_id=interval.project_id,
                size=dict(interval.size),
                status=phase.status,
                task_state=phase.task_state,
                created_at=lc.created_at,
                updated_at=phase.at,
                name=lc.name,
            ))
        return out

    def deleted_servers(self, cloud: str, since: datetime, at: datetime) -> list[PlatformRecord]:
        """Instances with ``since <= deleted_at <= at`` and ``deleted_at >= at - retention``, by deletion time."""
        at = to_utc(at)
        low_bound = max(to_utc(since), at - self.retention)
        times = self._deleted_times.get(cloud, [])
        items = self._deleted.get(cloud, [])
        out = []
        for lc in items[bisect_left(times, low_bound):bisect_right(times, at)]:
            assert lc.deleted_at is not None
            out.append(PlatformRecord(
                resource_type="instance",
                resource_id=lc.resource_id,
                project_id=lc.project_id,
                size=dict(lc.size),
                status="DELETED",
                task_state=None,
                created_at=lc.created_at,
                updated_at=lc.deleted_at,
                deleted_at=lc.deleted_at,
                name=lc.name,
            ))
        return out
