"""``POST /internal/sync/{cloud}`` when the config names a Dagster webserver: the sync runs as a Dagster run
of the reconciliation job, visible in the UI, tagged with the run id the API answered, and that run
completes the very ``sync_runs`` row the API reserved. A Dagster run that cannot run the sync leaves a
failed row with the reason, not a ``running`` one.

Real processes: ``dagster-webserver`` and ``dagster-daemon`` over the code location with the embedded
instance settings (runs queue, the daemon launches each as a process of its own), and ``tally serve``,
on one Postgres tally database.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tally_pipeline.bench.common import free_port
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.store import open_store
from tally_pipeline_tests.faults import migrate, wait_until
from tally_pipeline_tests.service_processes import Service

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "dagster-sync-admin-token-0123"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
RUN = """
query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status jobName tags { key value } } } }"""
LOCATIONS = """
{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus locationOrLoadError {
  __typename ... on RepositoryLocation { repositories { jobs { name } } } ... on PythonError { message } } } } } }"""


def _loaded_jobs(http: httpx.Client, web_port: int) -> set[str] | None:
    """The jobs of the webserver's code location once it has loaded (None while it loads); a location
    that loaded with an error fails the test with Dagster's own message."""
    answer = http.post(f"http://127.0.0.1:{web_port}/graphql", json={"query": LOCATIONS}).json()
    entries = answer["data"]["workspaceOrError"]["locationEntries"]
    if not entries or any(entry["loadStatus"] != "LOADED" for entry in entries):
        return None
    jobs: set[str] = set()
    for entry in entries:
        location = entry["locationOrLoadError"]
        assert location and location["__typename"] == "RepositoryLocation", f"{entry['name']} failed to load: {location}"
        jobs |= {job["name"] for repo in location["repositories"] for job in repo["jobs"]}
    return jobs


def _cloud(seed: int) -> dict[str, Any]:
    return {"provider": "simulated", "seed": seed, "resources": 15, "hours": 2}


@pytest.mark.slow
@pytest.mark.postgres
def test_a_sync_requested_from_the_api_runs_as_a_dagster_run(tmp_path: Path, pg_url: str) -> None:
    database = migrate(pg_url)
    web_port = free_port()
    location = {"database": database, "clouds": {"east": _cloud(1)}}
    (tmp_path / "location.yaml").write_text(yaml.safe_dump(location))
    # The API knows one cloud more than the code location: Dagster cannot run a sync of it.
    api_config = {**location, "clouds": {"east": _cloud(1), "ghost": _cloud(2)},
                  "dagster": {"url": f"http://127.0.0.1:{web_port}", "timeout": 60}}
    (tmp_path / "api.yaml").write_text(yaml.safe_dump(api_config))
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [
        {"token_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(), "scopes": ["admin"]}]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    # The embedded instance settings: runs queue (one per cloud) until the daemon launches them.
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "embedded" / "dagster.yaml").read_text())
    env = {**os.environ, "TALLY_CONFIG": str(tmp_path / "location.yaml"), "DAGSTER_HOME": str(home)}
    env.pop("TALLY_DATABASE", None)
    # Dagster's storage made once before the webserver and the daemon start, as docs/deploy.md has it: two
    # processes creating a fresh instance at once both stamp its alembic table, and it then has two heads.
    made = subprocess.run([str(Path(sys.executable).parent / "dagster"), "instance", "migrate"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    web = Service("webserver", [sys.executable, "-m", "dagster_webserver", "-w", str(ROOT / "workspace.yaml"),
                                "-h", "127.0.0.1", "-p", str(web_port), "--uvicorn-log-level", "info"], env=env, cwd=tmp_path,
                  ready_line="Uvicorn running on")
    daemon = Service("daemon", [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
                     env=env, cwd=tmp_path, ready_line=None)
    try:
        web.wait_ready(timeout=180)
        # Uvicorn listens before the code location has loaded (its code server starts apart, slowly on a
        # loaded machine): a deployment is ready once the location is, as an operator's probe would see.
        with httpx.Client(timeout=90) as probe:
            jobs = wait_until(lambda: _loaded_jobs(probe, web_port), "the code location to load", timeout=300)
        assert "reconciliation" in jobs, jobs
        with ServeProcess(database, config=tmp_path / "api.yaml", tokens_file=tmp_path / "tokens.yaml",
                          log_path=tmp_path / "serve.log") as api, \
                httpx.Client(timeout=90) as http:
            api.start()
            answer = http.post(f"{api.url}/internal/sync/east", headers=HEADERS)
            assert answer.status_code == 202, answer.text
            run_id = answer.json()["run_id"]
            assert answer.json()["executor"] == "dagster"

            def finished(location: str) -> dict[str, Any] | None:
                row = http.get(f"{api.url}{location}", headers=HEADERS, params={"wait": "10"}).json()
                return row if row["status"] != "running" else None

            row = wait_until(lambda: finished(answer.headers["location"]), "the Dagster run's sync", timeout=300)
            assert row["status"] == "succeeded" and row["created"] > 0, f"{row['status']}: {row.get('error')}; {row}"
            assert row["run_key"] == f"api:{run_id}" and row["dagster_run_id"]

            def dagster_run(dagster_run_id: str) -> dict[str, Any] | None:
                found = http.post(f"http://127.0.0.1:{web_port}/graphql",
                                  json={"query": RUN, "variables": {"id": dagster_run_id}}).json()
                run = found["data"]["runOrError"]
                return run if run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

            run = wait_until(lambda: dagster_run(row["dagster_run_id"]), "the Dagster run to end", timeout=120)
            tags = {t["key"]: t["value"] for t in run["tags"]}
            assert run["status"] == "SUCCESS" and run["jobName"] == "reconciliation"
            assert tags["tally/sync_run_id"] == run_id and tags["dagster/partition"] == "east"
            with open_store(database) as store:
                assert store.query("SELECT run_id, status FROM sync_runs WHERE cloud = 'east'") == [(run_id, "succeeded")]

            ghost = http.post(f"{api.url}/internal/sync/ghost", headers=HEADERS)
            assert ghost.status_code == 202, ghost.text
            ghost_run = ghost.json()["dagster_run_id"]
            assert wait_until(lambda: dagster_run(ghost_run), "the ghost cloud's Dagster run", timeout=300)["status"] \
                == "FAILURE"
            # Nobody read the run since: the next request finds the cloud held by a run that will never
            # end by itself, records it failed and starts a new one instead of answering 409.
            again = http.post(f"{api.url}/internal/sync/ghost", headers=HEADERS)
            assert again.status_code == 202 and again.json()["run_id"] != ghost.json()["run_id"], again.text
            failed = http.get(f"{api.url}{ghost.headers['location']}", headers=HEADERS).json()
            assert failed["status"] == "failed", failed
            assert failed["error"] == f"its Dagster run {ghost_run} ended FAILURE without recording the sync's end"
    finally:
        daemon.stop()
        web.stop()
