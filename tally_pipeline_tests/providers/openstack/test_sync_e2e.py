"""End to end through the real openstacksdk: simulator → lossy events → ingest → `tally sync` against the
fake OpenStack every 10 simulated minutes → the projection equals the ground truth, and instance
deletes carry nova's real deletion times."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
import yaml
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.providers.simulated import DeliverySpec, SimulationSpec, simulate
from tally_pipeline.runtime import Runtime
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store

CLOUD = "region-one"
SETTLE = timedelta(seconds=300)
TICK = timedelta(minutes=10)


@pytest.mark.slow
def test_sync_against_fake_openstack_converges_to_ground_truth(tmp_path) -> None:
    # seed 5: within 4 hours three instance deletes are lost, two of them with their creates
    spec = SimulationSpec(clouds=(CLOUD,), hours=4, seed=5, resources=40,
                          delivery=DeliverySpec(loss=0.1, duplicates=0.01))
    sim = simulate(spec)
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    store = open_store(url)
    ingestor = Ingestor(store, default_registry())
    with FakeOpenStack(sim.platform, cloud=CLOUD) as fake:
        config = tmp_path / "tally.yaml"
        config.write_text(yaml.safe_dump({
            "database": url,
            "clouds": {CLOUD: fake.tally_cloud_entry(timeout=10, retries=1)},
            "reconciliation": {"settle_window": SETTLE.total_seconds(), "mass_delete_guard": 0.5},
        }))
        runner = CliRunner()
        runtime = Runtime.load(str(config))  # one openstacksdk connection for the ticks in between
        previous = None
        tick = sim.start
        session = runtime.store.session()  # keep the DuckDB file open across ticks (one process)
        session.__enter__()
        while tick <= sim.end:
            with store.session():
                list(ingestor.ingest_stream(sim.stream.delivered(after=previous, until=tick), origin="collector"))
            fake.set_time(tick)
            stamp = format_rfc3339(tick)
            if tick == sim.start or tick + TICK > sim.end:  # the command itself, at both ends
                result = runner.invoke(main, ["sync", CLOUD, "--config", str(config), "--at", stamp,
                                              "--run-key", f"tick:{stamp}", "--json"])
                assert result.exit_code == 0, result.output
                run = orjson.loads(result.output[result.output.index("{"):])
            else:
                run = runtime.sync(CLOUD, now=tick, run_key=f"tick:{stamp}").as_json()
            assert run["status"] == "succeeded" and run["deleted_listing"] == "available", run
            previous, tick = tick, tick + TICK
        session.__exit__(None, None, None)
        runtime.close()
    end = previous
    rows = {(t, r): (status, project, orjson.loads(size) if isinstance(size, str) else size, deleted)
            for t, r, status, project, size, deleted in store.query(
                "SELECT resource_type, resource_id, status, project_id, size, deleted_at FROM current_resources "
                "WHERE cloud = %s", [CLOUD])}
    checked = 0
    for lc in sim.truth.lifecycles(cloud=CLOUD):
        changes = [lc.created_at, *(iv.start for iv in lc.intervals), *([lc.deleted_at] if lc.deleted_at else [])]
        phase = lc.phase_at(end)
        if max(changes) > end - SETTLE - TICK or (lc.alive_at(end) and phase and phase.task_state):
            continue  # still inside the settle window or in transition at the last sync
        status, project, size, deleted = rows.get((lc.resource_type, lc.resource_id), ("absent", None, None, None))
        if lc.alive_at(end):
            truth = lc.interval_at(end)
            assert (status, project, size) == ("live", truth.project_id, dict(truth.size)), lc.key
        elif status != "absent" or lc.resource_type == "instance":
            assert status == "deleted", lc.key
            if lc.resource_type == "instance":
                assert deleted == lc.deleted_at, lc.key  # nova's real deletion time, never a poll time
        checked += 1
    assert checked > 40
    lost = [k for k in sim.stream.lost_deletes if k.resource_type == "instance" and sim.truth.get(k).deleted_at
            and sim.start < sim.truth.get(k).deleted_at < end - SETTLE - TICK]
    assert len(lost) >= 2  # those deletes reached the ledger only through nova's deleted listing
    for key in lost:
        assert rows[(key.resource_type, key.resource_id)][3] == sim.truth.get(key).deleted_at
