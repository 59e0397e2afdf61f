"""How fast the simulator is: generation, and the platform view polled like a sync would poll it.

``python -m tally_pipeline.bench.sim [--hours H] [--clouds N] [--resources R]`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from typing import Any

from tally_pipeline.providers.simulated.simulation import simulate
from tally_pipeline.providers.simulated.spec import DeliverySpec, SimulationSpec


def measure(*, hours: float = 72.0, clouds: int = 2, resources: int = 60, seed: int = 1,
            poll_minutes: int = 10) -> dict[str, Any]:
    spec = SimulationSpec(
        clouds=tuple(f"sim-{i}" for i in range(clouds)), resources=resources, hours=hours, seed=seed,
        delivery=DeliverySpec(loss=0.05, duplicates=0.01),
    )
    began = time.perf_counter()
    sim = simulate(spec)
    generated = time.perf_counter() - began

    began = time.perf_counter()
    polls = listed = 0
    at = sim.start
    step = timedelta(minutes=poll_minutes)
    while at <= sim.end:
        for cloud in sim.clouds:
            for resource_type in spec.resource_types:
                listed += len(sim.platform.records(cloud, resource_type, at))
            listed += len(sim.platform.deleted_servers(cloud, at - 2 * step, at))
            polls += 1
        at += step
    polled = time.perf_counter() - began

    began = time.perf_counter()
    windows = 0
    at = sim.start
    while at <= sim.end:
        sim.stream.delivered(at - step, at)
        windows += 1
        at += step
    read = time.perf_counter() - began
    stats = sim.stream.stats()
    return {
        "spec": {"hours": hours, "clouds": clouds, "resources": resources, "seed": seed},
        "lifecycles": len(sim.truth),
        "events_generated": stats.events_generated,
        "generate_seconds": round(generated, 4),
        "view_polls": polls,
        "view_records": listed,
        "view_seconds": round(polled, 4),
        "view_ms_per_cloud_poll": round(1000 * polled / max(polls, 1), 3),
        "delivery_windows": windows,
        "delivery_window_seconds": round(read, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=72.0)
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--resources", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(measure(hours=args.hours, clouds=args.clouds, resources=args.resources, seed=args.seed)))


if __name__ == "__main__":
    main()
