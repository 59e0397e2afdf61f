"""The code location as a data engineer meets it: the Dagster webserver, read back over its GraphQL API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]

QUERY = """
{
  repositoriesOrError {
    ... on RepositoryConnection {
      nodes {
        name
        location { name }
        assetNodes { assetKey { path } groupName kinds }
        schedules { name cronSchedule scheduleState { status } }
        sensors { name sensorType sensorState { status } }
        jobs { name }
      }
    }
  }
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
  }
}
"""


@pytest.mark.slow
def test_webserver_serves_the_asset_graph_schedules_and_sensors(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\n"
                      "clouds:\n  region-one: {provider: simulated}\n  region-two: {provider: simulated}\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "embedded" / "dagster.yaml").read_text())
    env = {**os.environ, "TALLY_CONFIG": str(config), "DAGSTER_HOME": str(home)}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port),
         "--uvicorn-log-level", "info"],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    output: list[str] = []
    try:
        # Block on the server's own output until uvicorn says it listens (no polling, no sleeping).
        # Dagster's "Serving dagster-webserver" line comes before the socket is bound, so it is not enough.
        for line in proc.stdout:
            output.append(line.decode(errors="replace"))
            if "Uvicorn running on" in output[-1]:
                break
        else:
            pytest.fail("webserver exited: " + "".join(output)[-2000:])
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            data = http.post("/graphql", json={"query": QUERY}).json()["data"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            output.append(proc.communicate(timeout=30)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output.append(proc.communicate()[0].decode(errors="replace"))
    output = "".join(output)
    [entry] = data["workspaceOrError"]["locationEntries"]
    assert entry["name"] == "tally_pipeline" and entry["locationOrLoadError"]["__typename"] == "RepositoryLocation"
    [repo] = data["repositoriesOrError"]["nodes"]
    assets = {"/".join(a["assetKey"]["path"]): a for a in repo["assetNodes"]}
    assert {"raw_event_batches", "event_log", "dead_letter", "current_resources", "resource_intervals", "sync_runs",
            "usage_daily", "ledger_audit", "ledger_postings", "usage_checkpoints"} <= set(assets)
    assert assets["sync_runs"]["groupName"] == "reconciliation" and assets["usage_daily"]["groupName"] == "usage"
    schedules = {s["name"]: s for s in repo["schedules"]}
    assert schedules["reconciliation_schedule"]["cronSchedule"] == "*/10 * * * *"
    assert {"reconciliation_schedule", "delta_posting_schedule", "usage_daily_schedule"} <= set(schedules)
    sensors = {s["name"]: s for s in repo["sensors"]}
    assert {"landing_files_sensor", "settle_window_sensor", "api_writes_sensor", "events_silent_sensor", "sync_stale_sensor",
            "sync_errors_sensor", "drift_high_sensor", "automation_sensor"} <= set(sensors)
    # Declarative automation ships on: our own automation sensor, running without anyone switching it on.
    assert sensors["automation_sensor"]["sensorType"] == "AUTO_MATERIALIZE"  # an automation condition sensor
    assert sensors["automation_sensor"]["sensorState"]["status"] == "RUNNING"
    assert schedules["usage_daily_schedule"]["cronSchedule"] == "30 0 * * *"
    assert {"sync_deferrals", "projection_state", "cloud_activity"} <= set(assets)
    assert "duckdb" in assets["event_log"]["kinds"] and "postgres" not in assets["event_log"]["kinds"]
    assert "simulated" in assets["sync_runs"]["kinds"] and "openstack" not in assets["sync_runs"]["kinds"]
    assert {"reconciliation", "delta_posting", "landing_files", "usage_daily_job"} <= {j["name"] for j in repo["jobs"]}
    # Start-up prints no warnings at all (deprecations, "dagster.yaml will not be used", beta notices).
    warned = [line for line in output.splitlines() if "warning" in line.lower()]
    assert not warned, warned
