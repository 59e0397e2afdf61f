"""What to simulate: the clouds, their population and churn, transition durations, delivery faults.

A ``SimulationSpec`` plus its seed fixes everything the simulator produces, byte for byte.
``spec_for_cloud`` turns a ``simulated`` entry of the config file into a one-cloud spec.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING

from tally_pipeline.core.timeutil import parse_rfc3339, to_utc
from tally_pipeline.providers.simulated.platform import FailureMode
from tally_pipeline.schemas import default_registry

if TYPE_CHECKING:
    from tally_pipeline.config import SimulatedCloud

#: The types the simulator knows how to play: the packaged ones, in the registry's order, which is
#: the generation order (part of a seed's determinism: each schema's ``order`` fixes it).
SIMULATED_TYPES: tuple[str, ...] = default_registry().in_order
FAILURE_MODES: frozenset[str] = frozenset({"error", "timeout", "empty", "down_cell"})
_CLOUD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")

Seconds = tuple[int, int]  # an inclusive range a duration is drawn from, uniformly


@dataclass(frozen=True)
class TypeProfile:
    """How one type lives: its share of the live population, how long it lives, how often it changes.

    Lifetimes are ``minimum + exponential(mean_lifetime_hours)``, so the population stays near its
    share of ``resources`` (arrivals are Poisson at ``count / mean lifetime``).
    ``updates_per_hour`` is per live resource: resizes (instance), extends (volume), association
    changes (floating IP, no size change) or configuration updates (load balancer, no size change).
    Images change once, when their upload completes. ``power_changes_per_hour`` (instances) starts
    power episodes while a server is active: stopped, suspended, paused or shelved-offloaded for a
    while, then active again.
    """

    share: float
    mean_lifetime_hours: float
    updates_per_hour: float = 0.0
    power_changes_per_hour: float = 0.0

    def __post_init__(self) -> None:
        if (self.share < 0 or self.mean_lifetime_hours <= 0 or self.updates_per_hour < 0
                or self.power_changes_per_hour < 0):
            raise ValueError(f"invalid type profile {self}")


def default_profiles() -> Mapping[str, TypeProfile]:
    # About 60 live resources give roughly 170 creates, 170 deletes and 40 updates per cloud in 48 h.
    return MappingProxyType({
        "instance": TypeProfile(share=0.40, mean_lifetime_hours=12.0, updates_per_hour=0.02,
                                power_changes_per_hour=0.05),
        "volume": TypeProfile(share=0.25, mean_lifetime_hours=24.0, updates_per_hour=0.02),
        "floating_ip": TypeProfile(share=0.15, mean_lifetime_hours=16.0, updates_per_hour=0.05),
        "image": TypeProfile(share=0.10, mean_lifetime_hours=48.0),
        "load_balancer": TypeProfile(share=0.10, mean_lifetime_hours=24.0, updates_per_hour=0.03),
    })


@dataclass(frozen=True)
class TransitionTimes:
    """How long the platform shows each transitional state, in seconds (drawn uniformly per change)."""

    instance_build: Seconds = (20, 90)  # BUILD / spawning after created_at
    instance_resize: Seconds = (30, 180)  # RESIZE / resize_migrating
    instance_verify: Seconds = (10, 120)  # VERIFY_RESIZE (on the new flavor) until the confirm
    instance_delete: Seconds = (2, 15)  # ACTIVE / deleting before the server is gone
    volume_create: Seconds = (5, 30)
    volume_extend: Seconds = (5, 40)
    volume_delete: Seconds = (2, 20)
    image_queued: Seconds = (5, 60)
    image_upload: Seconds = (30, 600)  # saving, until active with its bytes
    load_balancer_create: Seconds = (60, 240)
    load_balancer_update: Seconds = (10, 60)
    load_balancer_delete: Seconds = (10, 60)

    def __post_init__(self) -> None:
        for name, (low, high) in vars(self).items():
            if not 0 <= low <= high:
                raise ValueError(f"transition {name}: need 0 <= low <= high, got ({low}, {high})")


@dataclass(frozen=True)
class DeliverySpec:
    """How the collectors deliver: loss, duplication, reordering and delay.

    Each event is lost with probability ``loss`` (no copy arrives). A delivered event gets one extra
    copy (same event_id, same content) with probability ``duplicates``, arriving
    ``duplicate_delay_seconds`` after the first. Delays are exponential with mean
    ``delay_mean_seconds``; with probability ``delay_tail_probability`` an event is held for
    ``delay_tail_seconds`` instead (a retry, a buffered collector). With ``reorder`` off each cloud's
    first copies arrive in emission order (delays only push later events back).
    """

    loss: float = 0.0
    duplicates: float = 0.0
    reorder: bool = True
    delay_mean_seconds: float = 2.0
    delay_tail_probability: float = 0.02
    delay_tail_seconds: tuple[float, float] = (60.0, 900.0)
    duplicate_delay_seconds: tuple[float, float] = (1.0, 600.0)

    def __post_init__(self) -> None:
        for name in ("loss", "duplicates", "delay_tail_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"delivery {name} must be within [0, 1], got {value}")
        if self.delay_mean_seconds < 0:
            raise ValueError("delivery delay_mean_seconds must be >= 0")
        for name in ("delay_tail_seconds", "duplicate_delay_seconds"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"delivery {name}: need 0 <= low <= high, got ({low}, {high})")


@dataclass(frozen=True)
class SimulationSpec:
    """Everything that decides a simulation. Same spec, same output.

    The simulated window is ``[start, start + hours)``. Resources alive at ``start`` (a warm cloud)
    were created up to ``warm_max_age_hours`` earlier; their create events (and an image's
    activation) are part of the collector stream, emitted and delivered before ``start`` (subject to
    the same loss), so ingesting everything delivered up to ``start`` gives the history a real
    deployment would hold. New creates, updates and deletes *start* inside the window; a transition
    begun inside it completes even past its end; after that nothing changes.
    ``failing_types`` maps cloud → resource type → fault, injected from the start.
    """

    clouds: tuple[str, ...] = ("sim",)
    projects: int = 4
    resources: int = 60
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    hours: float = 48.0
    seed: int = 1
    churn: float = 1.0
    profiles: Mapping[str, TypeProfile] = field(default_factory=default_profiles)
    transitions: TransitionTimes = field(default_factory=TransitionTimes)
    delivery: DeliverySpec = field(default_factory=DeliverySpec)
    retention_hours: float = 24.0
    warm_max_age_hours: float = 30 * 24.0
    failing_types: Mapping[str, Mapping[str, FailureMode]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "clouds", tuple(self.clouds))
        object.__setattr__(self, "start", to_utc(self.start))
        if not self.clouds:
            raise ValueError("a simulation needs at least one cloud")
        if len(set(self.clouds)) != len(self.clouds):
            raise ValueError(f"cloud names must be unique: {self.clouds}")
        for cloud in self.clouds:
            if not _CLOUD_NAME.match(cloud):
                raise ValueError(f"cloud name {cloud!r} must match {_CLOUD_NAME.pattern}")
        if self.projects < 1 or self.resources < 0:
            raise ValueError("need projects >= 1 and resources >= 0")
        if self.hours <= 0 or self.churn <= 0 or self.retention_hours <= 0 or self.warm_max_age_hours <= 0:
            raise ValueError("hours, churn, retention_hours and warm_max_age_hours must be positive")
        unknown = set(self.profiles) - set(SIMULATED_TYPES)
        if unknown:
            raise ValueError(f"no simulator for types {sorted(unknown)} (known: {', '.join(SIMULATED_TYPES)})")
        for cloud, modes in self.failing_types.items():
            if cloud not in self.clouds:
                raise ValueError(f"failing_types names unknown cloud {cloud!r}")
            for resource_type, mode in modes.items():
                if resource_type not in self.profiles:
                    raise ValueError(f"failing_types: {cloud}: {resource_type!r} is not a simulated type")
                if mode not in FAILURE_MODES:
                    raise ValueError(f"failing_types: {cloud}: {resource_type}: unknown mode {mode!r}")
                if mode == "down_cell" and resource_type != "instance":
                    raise ValueError(f"failing_types: {cloud}: {resource_type}: down_cell is a nova fault (instance)")

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.window_seconds)

    @property
    def window_seconds(self) -> int:
        return int(round(self.hours * 3600))

    @property
    def resource_types(self) -> tuple[str, ...]:
        return tuple(t for t in SIMULATED_TYPES if t in self.profiles)


def hour_floor(value: datetime) -> datetime:
    return to_utc(value).replace(minute=0, second=0, microsecond=0)


def spec_for_cloud(name: str, config: SimulatedCloud, *, now: datetime | None = None) -> SimulationSpec:
    """A one-cloud spec from a ``provider: simulated`` config entry.

    Without an explicit ``start`` the window is anchored to wall-clock time: it *ends* at ``now``
    floored to the hour and starts ``hours`` before, so a ``tally sync`` at any moment of one hour
    sees the same simulated cloud (deterministic within the hour). Past its end the platform keeps
    showing the cloud as it stood, so "now" is always answerable.
    """
    if config.start is not None:
        start = parse_rfc3339(config.start)
    else:
        end = hour_floor(now if now is not None else datetime.now(UTC))
        start = end - timedelta(seconds=int(round(config.hours * 3600)))
    return SimulationSpec(
        clouds=(name,),
        projects=config.projects,
        resources=config.resources,
        start=start,
        hours=config.hours,
        seed=config.seed,
        churn=config.churn,
        delivery=DeliverySpec(loss=config.loss, duplicates=config.duplicates),
        retention_hours=config.retention_hours,
        failing_types={name: dict(config.failing_types)} if config.failing_types else {},
    )
