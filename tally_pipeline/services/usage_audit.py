"""The standing audit of the ledger against nova's own usage, for one OpenStack cloud and window.

Reads nova's ``os-simple-tenant-usage`` (``adapters.openstack_usage``), the cloud's server intervals,
checkpoints, ledger balance and deferrals (``store.usage_audits``, ``services.ledger.verify``), lets
``providers.openstack.usage_audit`` compare them, and keeps the verdict in ``usage_audits`` (for ``/metrics`` and
the alert). The projection is folded first, as every reader does.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from tally_pipeline.config import AuditSettings
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.usage import Interval, to_micro, to_units
from tally_pipeline.providers.openstack import usage_audit as rules
from tally_pipeline.store import usage_audits
from tally_pipeline.store.base import Store


@dataclass
class AuditRun:
    """One audit: its result (None when it could not be made), what it cost, and why it failed."""

    audit_id: str
    cloud: str
    window_start: datetime
    window_end: datetime
    result: rules.AuditResult | None
    api_calls: int
    seconds: float
    error: str | None = None

    @property
    def status(self) -> str:
        if self.result is None:
            return "error"
        return "passed" if self.result.passed else "failed"

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"audit_id": self.audit_id, "cloud": self.cloud, "status": self.status,
                                "api_calls": self.api_calls, "seconds": round(self.seconds, 3), "error": self.error}
        if self.result is not None:
            body.update(self.result.to_dict())
        else:
            body.update({"window_start": self.window_start.isoformat(), "window_end": self.window_end.isoformat()})
        return body


def _size(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def ledger_entities(store: Store, registry: SizeSchemaRegistry, cloud: str) -> dict[tuple[str, str], rules.LedgerEntity]:
    """Per (project, audited meter) of the cloud: the checkpoint's clamp, and how far the postings stand
    from the lifecycles through it (``services.ledger.verify``'s discrepancies)."""
    from tally_pipeline.services.ledger.verify import verify

    entities = {key: rules.LedgerEntity(clamp) for key, clamp in usage_audits.checkpoint_clamps(store, cloud).items()
                if key[1] in rules.AUDITED_METERS}
    for d in verify(store, registry).discrepancies:
        if d.cloud != cloud or d.meter not in rules.AUDITED_METERS:
            continue
        key = (d.project_id, d.meter)
        known = entities.get(key, rules.LedgerEntity(d.clamp))
        if d.kind in ("ledger_mismatch", "orphan_postings"):
            total = d.checkpoint_total if d.checkpoint_total is not None else Decimal(0)
            mismatch = to_micro(d.posted) - to_micro(total)
            pending = (to_micro(total) - to_micro(d.recomputed)) if d.recomputed is not None else 0
            entities[key] = rules.LedgerEntity(known.clamp, mismatch, pending)
        elif d.kind == "history_changed" and d.recomputed is not None:
            entities[key] = rules.LedgerEntity(known.clamp, 0, to_micro(d.posted) - to_micro(d.recomputed))
    return entities


def _latest_cycle_clamp(store: Store) -> datetime | None:
    from tally_pipeline.store.ledger_records import latest_cycle

    latest = store.run(latest_cycle)
    return None if latest is None else _utc(latest[1])


def tally_intervals(store: Store, cloud: str, start: datetime, end: datetime) -> list[rules.TallyInterval]:
    return [rules.TallyInterval(str(rid), str(project), Interval(_utc(s), None if e is None else _utc(e), _size(size),
                                                                  str(rid), status), int(lifecycle or 0))
            for rid, project, s, e, size, status, lifecycle in usage_audits.server_intervals(store, cloud, start, end)]


def audit_usage(store: Store, registry: SizeSchemaRegistry, cloud: str, adapter: Any, start: datetime, end: datetime,
                settings: AuditSettings, *, now: datetime | None = None, keep: bool = True) -> AuditRun:
    """Audit ``cloud`` over ``[start, end)`` (``end`` is cut to now, as nova cuts it) and keep the verdict.

    An audit that cannot be made (nova unreadable, an empty window) is an ``error`` run with its reason,
    kept too: the check and the alert are red on it, never silently green."""
    from tally_pipeline.providers.openstack.usage import read_usage
    from tally_pipeline.services.projection import refresh

    now = _utc(now or datetime.now(UTC))
    start, end = _utc(start), min(_utc(end), now)
    run = AuditRun(str(uuid.uuid4()), cloud, start, end, None, 0, 0.0)
    began = time.perf_counter()
    try:
        if not start < end:
            raise rules.AuditError(f"the window [{start.isoformat()}, {end.isoformat()}) is empty (its end is cut "
                                   "to now)")
        refresh(store)
        nova = read_usage(adapter, start, end, page_size=settings.page_size)
        run.api_calls = nova.pages
        if nova.stop is not None:
            end = run.window_end = min(end, nova.stop)  # nova cut the window at its own now
        meters = {m.name: m for m in registry.meters() if m.name in rules.AUDITED_METERS}
        run.result = rules.audit(
            cloud, start, end, meters=meters, nova=nova.servers, tally=tally_intervals(store, cloud, start, end),
            ledger=ledger_entities(store, registry, cloud),
            deferred=usage_audits.deferred_servers(store, cloud, start),
            cycle_clamp=_latest_cycle_clamp(store),
            settings=rules.AuditSettings(Decimal(str(settings.tolerance_hours)), Decimal(str(settings.tolerance_ratio)),
                                         settings.rounding_seconds))
    except Exception as exc:  # noqa: BLE001 - recorded as an error audit, with its reason
        from tally_pipeline.providers.interface import AdapterError

        if not isinstance(exc, AdapterError | rules.AuditError):
            raise
        run.error = str(exc)[:1000]
    run.seconds = time.perf_counter() - began
    if keep:
        usage_audits.record(store, _row(run, now))
    return run


def _row(run: AuditRun, now: datetime) -> dict[str, Any]:
    result = run.result
    return {
        "audit_id": run.audit_id, "cloud": run.cloud, "audited_at": now, "recorded_at": datetime.now(UTC),
        "window_start": run.window_start,
        "window_end": run.window_end, "status": run.status,
        "projects": len(result.projects) if result else 0,
        "projects_failing": len(result.failing) if result else 0,
        "servers_nova": result.servers_nova if result else 0, "servers_tally": result.servers_tally if result else 0,
        "unexplained_instance_hours": to_units(result.unexplained_micro("instance_hours")) if result else Decimal(0),
        "unexplained_vcpu_hours": to_units(result.unexplained_micro("vcpu_hours")) if result else Decimal(0),
        "differences": result.by_kind() if result else {}, "api_calls": run.api_calls, "seconds": run.seconds,
        "error": run.error,
    }


def latest_audits(store: Store) -> list[dict[str, Any]]:
    return usage_audits.latest(store)
