"""A ground-truth cloud simulator: what really happened, what the collectors said, what the platform shows.

``simulate(SimulationSpec(...))`` gives a ``Simulation`` with ``truth`` (lifecycles and exact
usage), ``stream`` (collector events with lossy, duplicated, delayed delivery) and ``platform``
(a ``PlatformView`` with transitional statuses, deleted servers and injectable faults).
"""

from tally_pipeline.providers.simulated.platform import FailureMode, PlatformRecord, PlatformView
from tally_pipeline.providers.simulated.simulation import Simulation, simulate, simulate_cloud
from tally_pipeline.providers.simulated.spec import (
    SIMULATED_TYPES,
    DeliverySpec,
    SimulationSpec,
    TransitionTimes,
    TypeProfile,
    default_profiles,
    spec_for_cloud,
)
from tally_pipeline.providers.simulated.stream import EVENT_TYPES, CollectorStream, Delivery, DeliveryStats
from tally_pipeline.providers.simulated.truth import GroundTruth, Interval, Lifecycle, Phase, ResourceKey
from tally_pipeline.providers.simulated.view import SimulatedPlatform

__all__ = [
    "EVENT_TYPES",
    "SIMULATED_TYPES",
    "CollectorStream",
    "Delivery",
    "DeliverySpec",
    "DeliveryStats",
    "FailureMode",
    "GroundTruth",
    "Interval",
    "Lifecycle",
    "Phase",
    "PlatformRecord",
    "PlatformView",
    "ResourceKey",
    "SimulatedPlatform",
    "Simulation",
    "SimulationSpec",
    "TransitionTimes",
    "TypeProfile",
    "default_profiles",
    "simulate",
    "simulate_cloud",
    "spec_for_cloud",
]
