"""One simulation: its spec, the ground truth, the collector stream and the platform's view."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tally_pipeline.providers.simulated.generator import generate_truth
from tally_pipeline.providers.simulated.spec import SimulationSpec, spec_for_cloud
from tally_pipeline.providers.simulated.stream import CollectorStream
from tally_pipeline.providers.simulated.truth import GroundTruth
from tally_pipeline.providers.simulated.view import SimulatedPlatform

if TYPE_CHECKING:
    from tally_pipeline.config import SimulatedCloud


@dataclass
class Simulation:
    spec: SimulationSpec
    truth: GroundTruth
    stream: CollectorStream
    platform: SimulatedPlatform

    @property
    def start(self) -> datetime:
        return self.spec.start

    @property
    def end(self) -> datetime:
        return self.spec.end

    @property
    def clouds(self) -> tuple[str, ...]:
        return self.spec.clouds


def simulate(spec: SimulationSpec) -> Simulation:
    """Run the generator. The truth is drawn before delivery, so delivery settings never change it."""
    rng = random.Random(spec.seed)
    truth = generate_truth(spec, rng)
    stream = CollectorStream(truth, spec.delivery, rng)
    platform = SimulatedPlatform(
        truth,
        resource_types=spec.resource_types,
        retention=timedelta(hours=spec.retention_hours),
        failing_types=spec.failing_types,
    )
    return Simulation(spec, truth, stream, platform)


def simulate_cloud(name: str, config: SimulatedCloud, *, now: datetime | None = None) -> Simulation:
    """The simulation behind a ``provider: simulated`` config entry (see ``spec_for_cloud`` for its window)."""
    return simulate(spec_for_cloud(name, config, now=now))
