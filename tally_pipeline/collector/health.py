"""Per service, what the bus collector hears: the shape ``/healthz`` gives it in, and how
``tally openstack check --collector`` reads it back.

A service publishes on one exchange (its control exchange; oslo.messaging's ``openstack`` when it
sets none, as cinder does); the collector binds exchanges, not services. So the per-service view is
the exchange's state seen through the configured ``service_exchanges``, and a service the collector
is not told about is as unheard as one whose exchange is not bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.providers.openstack import SERVICE_OF_TYPE

#: Silence longer than this is "no message recently" (as the cloud-silent alert's hour).
RECENT_SECONDS = 3600.0


def services_json(service_exchanges: Iterable[tuple[str, str]], exchanges: Mapping[str, Any],
                  now: float) -> dict[str, dict[str, Any]]:
    """``/healthz``'s ``services``: per service its exchange and that exchange's state (``ExchangeState``)."""
    out: dict[str, dict[str, Any]] = {}
    for service, exchange in service_exchanges:
        state = exchanges.get(exchange)
        last = None if state is None else state.last_message_at
        out[service] = {
            "exchange": exchange,
            "bound": bool(state is not None and state.bound),
            "declared": None if state is None else state.declared,
            "why_unbound": None if state is None else state.why_unbound,
            "mismatch": None if state is None else state.mismatch,
            "last_message_at": None if last is None else datetime.fromtimestamp(last, UTC).isoformat(),
            "last_message_age_seconds": None if last is None else round(max(0.0, now - last), 1),
        }
    return out


@dataclass(frozen=True)
class ServiceHearing:
    """Whether the collector hears one service the cloud's reconciliation covers."""

    service: str
    resource_types: tuple[str, ...]
    exchange: str | None  # None: the collector is not told about this service
    bound: bool
    why_unbound: str | None
    mismatch: str | None
    last_message_age_seconds: float | None
    recent: bool

    @property
    def problem(self) -> str | None:
        """Why the collector does not hear this service, or None when its queue is bound to its exchange."""
        if self.exchange is None:
            return "the collector does not listen for this service (add it to collector.service_exchanges)"
        if not self.bound:
            return f"exchange {self.exchange!r} not bound: {self.why_unbound or 'unknown'}"
        return None

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "resource_types": list(self.resource_types), "problem": self.problem}


def hearing(health: Mapping[str, Any], resource_types: Iterable[str], *,
            recent_seconds: float = RECENT_SECONDS) -> list[ServiceHearing]:
    """Per service notifying about ``resource_types``, what the collector's ``/healthz`` body says of it."""
    types_of: dict[str, list[str]] = {}
    for rtype in resource_types:
        types_of.setdefault(SERVICE_OF_TYPE.get(rtype, rtype), []).append(rtype)
    services = health.get("services") or {}
    out = []
    for service, types in types_of.items():
        entry = services.get(service)
        if not isinstance(entry, Mapping):
            out.append(ServiceHearing(service, tuple(types), None, False, None, None, None, False))
            continue
        age = entry.get("last_message_age_seconds")
        age = float(age) if isinstance(age, int | float) else None
        out.append(ServiceHearing(
            service, tuple(types), str(entry.get("exchange")), bool(entry.get("bound")), entry.get("why_unbound"),
            entry.get("mismatch"), age, age is not None and age <= recent_seconds))
    return out
