"""``POST /internal/sync/{cloud}`` against a real ``tally serve`` process, on an embedded DuckDB file and on
Postgres: it answers 202 at once, the run is followed at its ``Location`` until it ends, one cloud runs
one sync at a time (409 names the running one), an ``Idempotency-Key`` makes a retry answer the same
run (after a restart too), ``?wait`` answers the finished run, and a server that stops mid-sync
records the run failed instead of leaving it ``running``.

The OpenStack cloud is the project's fake over HTTP: a listing held keeps a run ``running`` for as long
as a test needs, without any sleep, and answers when released.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.cli import main
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.fakes.static_view import RESOURCE_TYPES, StaticView
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.store import open_store
from tally_pipeline_tests.faults import migrate, wait_until

pytestmark = pytest.mark.slow  # a real process or a long property search per test

ADMIN = "sync-admin-token-0123456789"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
FINISHED = {"succeeded", "partial", "failed"}
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _volume(n: int) -> PlatformRecord:
    return PlatformRecord("volume", f"vol-{n}", "proj-a", {"gb": 10, "volume_type": "ssd"}, "available", None,
                          T0, T0, None, f"vol-{n}")


@dataclass
class SyncApi:
    server: ServeProcess
    database: str
    fake: FakeOpenStack
    http: httpx.Client

    def post(self, cloud: str, *, key: str | None = None, wait: int | None = None) -> httpx.Response:
        headers = {**HEADERS, **({"Idempotency-Key": key} if key is not None else {})}
        params = {"wait": str(wait)} if wait is not None else None
        return self.http.post(f"/internal/sync/{cloud}", headers=headers, params=params)

    def get(self, location: str, *, wait: int | None = None) -> httpx.Response:
        return self.http.get(location, headers=HEADERS, params={"wait": str(wait)} if wait is not None else None)

    def follow(self, location: str) -> dict[str, Any]:
        """The run at ``location`` once it has finished (each read waits up to 10 s for it)."""
        return wait_until(lambda: (row := self.get(location, wait=10).json())["status"] in FINISHED and row,
                          f"the run at {location} to finish", timeout=120)

    def rows(self, cloud: str) -> list[tuple[str, str, str | None]]:
        """The cloud's ``sync_runs`` rows as the database holds them: (run_id, status, error)."""
        with open_store(self.database) as store:
            return store.query("SELECT run_id, status, error FROM sync_runs WHERE cloud = %s ORDER BY started_at",
                               [cloud])

    def lock_holder(self, cloud: str) -> list[tuple[str]]:
        with open_store(self.database) as store:
            return store.query("SELECT run_id FROM sync_locks WHERE cloud = %s", [cloud])


def _config(path: Path, database: str, fake: FakeOpenStack, **api: Any) -> Path:
    held = fake.tally_cloud_entry(timeout=10, retries=1, resource_types=["volume"])
    path.write_text(yaml.safe_dump({
        "database": database,
        "clouds": {
            "quick": {"provider": "simulated", "seed": 3, "resources": 20, "hours": 2},
            "waited": {"provider": "simulated", "seed": 4, "resources": 20, "hours": 2},
            "keyed": {"provider": "simulated", "seed": 5, "resources": 20, "hours": 2},
            "broken": {"provider": "simulated", "seed": 6, "resources": 20, "hours": 2,
                       "failing_types": dict.fromkeys(RESOURCE_TYPES, "error")},
            "held": held,
            "remote-a": {"provider": "simulated", "seed": 7, "resources": 20, "hours": 2},
            "remote-b": {"provider": "simulated", "seed": 8, "resources": 20, "hours": 2},
        },
        **({"api": api} if api else {}),
    }))
    return path


def _tokens(path: Path) -> Path:
    path.write_text(yaml.safe_dump({"tokens": [{"token_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(),
                                                "scopes": ["admin"]}]}))
    return path


def _database(backend: str, directory: Path, pg_databases: Any) -> str:
    if backend == "duckdb":
        return f"duckdb://{directory / 'tally.duckdb'}"
    return migrate(pg_databases.create())


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncApi]:
    """One ``tally serve`` per backend for the module; each test syncs clouds of its own."""
    directory = tmp_path_factory.mktemp(f"sync-{request.param}")
    database = _database(request.param, directory, request.getfixturevalue("pg_databases")
                         if request.param == "postgres" else None)
    with FakeOpenStack(StaticView.of([_volume(n) for n in range(3)]), cloud="held") as fake:
        config = _config(directory / "tally.yaml", database, fake)
        with ServeProcess(database, config=config, tokens_file=_tokens(directory / "tokens.yaml"),
                          log_path=directory / "serve.log") as server:
            server.start()
            with httpx.Client(base_url=server.url, timeout=90) as http:
                yield SyncApi(server, database, fake, http)


def _at_once(*calls: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """Run the calls on threads released together; their answers, in call order."""
    gate = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], httpx.Response]) -> None:
        gate.wait()
        answers[i] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def _hanging(fake: FakeOpenStack) -> Any:
    """The fake's record of the sync's volume listing, hanging (status 0), once it has begun."""
    found = fake.wait_for(lambda r: r.resource_type == "volume" and r.status == 0, timeout=60)
    assert found is not None, "the sync never reached the hanging volume listing"
    return found


def test_a_sync_answers_202_at_once_and_its_run_ends_succeeded(api: SyncApi) -> None:
    answer = api.post("quick")
    assert answer.status_code == 202, answer.text
    run = answer.json()
    assert answer.headers["location"] == f"/internal/sync/quick/runs/{run['run_id']}"
    assert run["cloud"] == "quick" and run["executor"] == "api" and run["status"] in {"running", "succeeded"}
    finished = api.follow(answer.headers["location"])
    assert finished["run_id"] == run["run_id"] and finished["status"] == "succeeded"
    assert finished["created"] > 0 and finished["finished_at"] is not None and finished["error"] is None
    assert api.rows("quick") == [(run["run_id"], "succeeded", None)]
    assert api.lock_holder("quick") == []


def test_a_failing_platform_gives_a_failed_run_with_its_error(api: SyncApi) -> None:
    answer = api.post("broken")
    assert answer.status_code == 202, answer.text
    finished = api.follow(answer.headers["location"])
    assert finished["status"] == "failed"
    assert "instance:" in finished["error"] and "volume:" in finished["error"]
    assert all(outcome["status"] == "failed" for outcome in finished["per_type"].values())
    assert api.rows("broken") == [(finished["run_id"], "failed", finished["error"])]


def test_two_concurrent_posts_for_one_cloud_give_one_run_and_one_409(api: SyncApi) -> None:
    api.fake.inject("volume", "hold")  # the run's listing hangs: it stays running until released
    try:
        answers = _at_once(lambda: api.post("held"), lambda: api.post("held"))
        assert sorted(a.status_code for a in answers) == [202, 409], [a.text for a in answers]
        started = next(a for a in answers if a.status_code == 202)
        refused = next(a for a in answers if a.status_code == 409).json()
        run_id = started.json()["run_id"]
        assert refused["error"] == "sync_in_progress" and refused["run_id"] == run_id
        assert refused["location"] == started.headers["location"]
        _hanging(api.fake)
        running = api.get(started.headers["location"])
        assert running.status_code == 200 and running.json()["status"] == "running"
        assert api.post("held").status_code == 409  # still one run at a time
    finally:
        api.fake.clear_faults()
        api.fake.release_held()  # the held page answers: the run goes on
    finished = api.follow(started.headers["location"])
    assert finished["status"] == "succeeded" and finished["created"] == 3
    assert [r[0] for r in api.rows("held")] == [run_id]


def test_the_same_idempotency_key_gives_one_run_across_retries_and_a_restart(api: SyncApi) -> None:
    first, second = _at_once(lambda: api.post("keyed", key="job-42"), lambda: api.post("keyed", key="job-42"))
    assert first.status_code == second.status_code == 202, (first.text, second.text)
    run_id = first.json()["run_id"]
    assert second.json()["run_id"] == run_id and second.headers["location"] == first.headers["location"]
    finished = api.follow(first.headers["location"])
    again = api.post("keyed", key="job-42")
    assert again.status_code == 202 and again.json() == finished  # the same run, as it ended

    api.server.stop()
    api.server.start()
    after = api.post("keyed", key="job-42")
    assert after.status_code == 202 and after.json()["run_id"] == run_id
    other = api.post("keyed", key="job-43")  # another key is another run
    assert other.status_code == 202 and other.json()["run_id"] != run_id
    api.follow(other.headers["location"])
    assert [r[0] for r in api.rows("keyed")] == [run_id, other.json()["run_id"]]


def test_wait_answers_the_finished_run(api: SyncApi) -> None:
    answer = api.post("waited", wait=60)
    assert answer.status_code == 200, answer.text
    run = answer.json()
    assert run["status"] == "succeeded" and run["finished_at"] is not None
    assert answer.headers["location"] == f"/internal/sync/waited/runs/{run['run_id']}"
    read = api.get(answer.headers["location"], wait=60)
    assert read.status_code == 200 and read.json() == run
    assert api.get("/internal/sync/waited/runs/no-such-run").status_code == 404
    assert api.get(f"/internal/sync/quick/runs/{run['run_id']}").status_code == 404  # another cloud's run
    assert api.post("waited", wait=61).status_code == 400


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_a_server_stopping_mid_sync_records_the_run_failed_and_frees_the_cloud(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    database = _database(backend, tmp_path, request.getfixturevalue("pg_databases") if backend == "postgres" else None)
    with FakeOpenStack(StaticView.of([_volume(0)]), cloud="held") as fake:
        config = _config(tmp_path / "tally.yaml", database, fake, sync_shutdown_grace=0.5)
        fake.inject("volume", "timeout")
        with ServeProcess(database, config=config, tokens_file=_tokens(tmp_path / "tokens.yaml"),
                          log_path=tmp_path / "serve.log") as server:
            server.start()
            with httpx.Client(base_url=server.url, timeout=60) as http:
                api = SyncApi(server, database, fake, http)
                answer = api.post("held")
                assert answer.status_code == 202
                _hanging(fake)
                # SIGTERM: uvicorn shuts down (the lifespan's end stops the sync workers), then re-raises
                # the signal; a server that had to be killed (SIGKILL) would have recorded nothing.
                assert server.stop(timeout=30) in (0, -signal.SIGTERM), server.log_tail()
                [(run_id, status, error)] = api.rows("held")
                assert run_id == answer.json()["run_id"] and status == "failed"
                assert "shut down during the sync" in error
                assert api.lock_holder("held") == []
                fake.clear_faults()
                server.start()
                restarted = api.post("held", wait=60)  # not 409: the cloud was freed
                assert restarted.status_code == 200 and restarted.json()["status"] == "succeeded"
                assert api.get(answer.headers["location"]).json()["status"] == "failed"


# --- tally sync-remote: what the CronJob runs ---------------------------------------------------------------


def _sync_remote(api: SyncApi, config: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["sync-remote", "--config", str(config), "--api-url", api.server.url, *args],
                              env={"TALLY_SYNC_TOKEN": ADMIN}, catch_exceptions=False)


def test_sync_remote_runs_every_configured_cloud_to_its_end(api: SyncApi, tmp_path: Path) -> None:
    config = tmp_path / "remote.yaml"  # the CronJob's config lists the clouds to reconcile
    config.write_text(yaml.safe_dump({"clouds": {name: {"provider": "simulated", "seed": 1}
                                                 for name in ("remote-a", "remote-b")}}))
    done = _sync_remote(api, config, "--key", "tally-sync-29000000", "--json")
    assert done.exit_code == 0, done.output
    runs = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["cloud"], r["status"], r["joined"]) for r in runs] == [("remote-a", "succeeded", False),
                                                                      ("remote-b", "succeeded", False)]
    assert all(r["created"] > 0 for r in runs)
    again = _sync_remote(api, config, "--key", "tally-sync-29000000", "--json")  # the Job's pod, restarted
    assert [json.loads(line)["run_id"] for line in again.stdout.splitlines()] == [r["run_id"] for r in runs]
    assert [len(api.rows(cloud)) for cloud in ("remote-a", "remote-b")] == [1, 1]

    failed = _sync_remote(api, config, "--cloud", "broken")
    assert failed.exit_code == 1 and failed.stdout.startswith("broken: failed, run ")
    unknown = _sync_remote(api, config, "--cloud", "nowhere")
    assert unknown.exit_code == 1 and "404 unknown_cloud" in unknown.output


def test_sync_remote_follows_a_run_already_going_instead_of_failing(api: SyncApi, tmp_path: Path) -> None:
    config = tmp_path / "remote.yaml"
    config.write_text(yaml.safe_dump({"clouds": {"held": {"provider": "simulated"}}}))
    api.fake.clear_requests()
    api.fake.inject("volume", "hold")
    follower = None
    try:
        started = api.post("held")  # someone else's run (a Dagster schedule's, an operator's)
        assert started.status_code == 202
        _hanging(api.fake)
        follower = subprocess.Popen(
            [sys.executable, "-m", "tally_pipeline", "sync-remote", "--config", str(config), "--api-url", api.server.url,
             "--json"], env={**os.environ, "TALLY_SYNC_TOKEN": ADMIN}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        assert follower.stderr is not None
        said = follower.stderr.readline()  # blocks until the command has had its answer
        assert said == f"held: run {started.json()['run_id']} was already going: following it\n", said
    finally:
        api.fake.clear_faults()
        api.fake.release_held()
    assert follower is not None
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, (out, err)
    [outcome] = [json.loads(line) for line in out.splitlines()]
    assert outcome["run_id"] == started.json()["run_id"] and outcome["joined"] is True
    assert outcome["status"] == "succeeded"
    assert [r[0] for r in api.rows("held")][-1] == started.json()["run_id"]
