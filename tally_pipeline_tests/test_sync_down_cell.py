"""A down nova cell as a simulated platform fault: its servers vanish from listings, yet none is deleted."""

from __future__ import annotations

import pytest

from tally_pipeline.bench import accuracy
from tally_pipeline.providers.simulated import DeliverySpec, SimulationSpec, simulate
from tally_pipeline.providers.simulated.platform import in_down_cell


@pytest.mark.slow
def test_a_down_cell_never_deletes_its_running_servers() -> None:
    spec = SimulationSpec(clouds=("sim-1",), resources=80, hours=4, seed=1, delivery=DeliverySpec(loss=0.0),
                          failing_types={"sim-1": {"instance": "down_cell"}})
    sim = simulate(spec)
    d = accuracy.drive(sim)
    hidden_alive = {lc.resource_id for lc in sim.truth.lifecycles(cloud="sim-1", resource_type="instance")
                    if in_down_cell(lc.resource_id) and lc.alive_at(sim.end)}
    assert hidden_alive, "the seed must put running servers in the down cell"
    deleted = {rid for (rid,) in d.reconciled.query(
        "SELECT resource_id FROM events WHERE event_type = 'sync.delete' AND resource_type = 'instance'")}
    assert not deleted & hidden_alive
    unconfirmed = sum(run.unconfirmed for run in d.runs)
    assert unconfirmed > 0
    report = accuracy.report(d)
    assert report["faults"] == {"sim-1": {"instance": "down_cell"}}
    assert report["deferrals"]["unconfirmed"] == unconfirmed
    # with no collector loss, what the events say stands: reconciliation removes no instance-hours
    assert report["per_type"]["instance"]["reconciled_error"] == report["per_type"]["instance"]["events_only_error"]
