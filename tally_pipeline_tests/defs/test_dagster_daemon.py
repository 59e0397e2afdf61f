"""The real Dagster daemon: automation fills the projections in, and an API write reaches them by itself."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from tally_pipeline.runtime import Runtime
from tally_pipeline.services.ingest import Ingestor

ROOT = Path(__file__).resolve().parents[2]
# A run of the projections: automation's (__ASSET_JOB) or the projection_refresh run api_writes_sensor starts.
AUTOMATION_RUN_DONE = re.compile(r"(?:__ASSET_JOB|projection_refresh) - ([0-9a-f-]{36}) - .*RUN_(SUCCESS|FAILURE)")
# What a failure message quotes from the whole log besides its tail: each tick's decisions and each run's fate,
# so a run that never came says which part stopped (the sensor recording, automation requesting, the queue).
STORY = re.compile(r"Tick produced|Submitted run|api_writes_sensor|RUN_(START|SUCCESS|FAILURE|DEQUEUED|ENQUEUED)"
                   r"|ERROR|Traceback|pool")


class Output:
    """The daemon's output, line by line, read on a thread so the test can wait for a line with a deadline."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            self._queue.put(raw.decode(errors="replace"))
        self._queue.put(None)

    def wait_for(self, pattern: re.Pattern, deadline: float) -> re.Match:
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line matching {pattern.pattern} in time\n{self.story()}")
            if line is None:
                pytest.fail(f"daemon exited\n{self.story()}")
            self.lines.append(line)
            match = pattern.search(line)
            if match:
                return match

    def story(self) -> str:
        told = [line for line in self.lines if STORY.search(line)]
        return "".join(["the daemon's decisions:\n", *told[-60:], "its last lines:\n", "".join(self.lines)[-2000:]])

    def run_done(self, deadline: float) -> str:
        """The id of the next asset run to finish (automation's or a sensor's); a failed one fails the test."""
        match = self.wait_for(AUTOMATION_RUN_DONE, deadline)
        if match.group(2) != "SUCCESS":
            pytest.fail(f"automation run {match.group(1)} failed\n{self.story()}")
        return match.group(1)


def event(eid: str, rid: str) -> dict:
    return {"event_id": eid, "event_type": "volume.create.end", "cloud": "region-one", "resource_type": "volume",
            "resource_id": rid, "project_id": "p1", "occurred_at": datetime.now(UTC).isoformat(),
            "payload": {"size": {"gb": 10, "volume_type": None}}}


@pytest.mark.slow
def test_the_daemon_refreshes_the_projections_after_an_api_write(tmp_path, pg_url) -> None:
    config = tmp_path / "tally.yaml"
    # No cloud configured: no scheduled sync re-folds the projection behind automation's back.
    config.write_text(f"database: {pg_url}\nclouds: {{}}\n")
    rt = Runtime.load(str(config))
    rt.store.migrate()
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "embedded" / "dagster.yaml").read_text())
    env = {**os.environ, "TALLY_CONFIG": str(config), "DAGSTER_HOME": str(home)}
    # The hourly posting (and the nightly usage_daily) refresh the projection too; one that fell due
    # while the test runs would leave automation nothing to do. Stopped in this instance only.
    for schedule in ("delta_posting_schedule", "usage_daily_schedule"):
        subprocess.run([sys.executable, "-m", "dagster", "schedule", "stop", schedule, "-w", str(ROOT / "workspace.yaml")],
                       cwd=tmp_path, env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster._daemon", "run", "-w", str(ROOT / "workspace.yaml")],
        cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    output = Output(proc)
    try:
        # Nobody switches automation on: the daemon's own ticks fill in the never-materialized projections.
        first = output.run_done(time.monotonic() + 300)
        # The API stores an event (the same ingest core); api_writes_sensor records it and starts the refold.
        Ingestor(rt.store, rt.registry).ingest([event("d1", "v-daemon")], origin="api")
        written = time.monotonic()
        second = output.run_done(written + 300)
        elapsed = time.monotonic() - written
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert first != second
    print(f"API write to refreshed projection: {elapsed:.0f} s")
    assert rt.store.query("SELECT status FROM current_resources WHERE resource_id = 'v-daemon'") == [("live",)]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(second)
        # the refresh api_writes_sensor started, not automation's (whose eager() can lose the write in a tie)
        assert run is not None and run.job_name == "projection_refresh"
        assert run.tags.get("dagster/sensor_name") == "api_writes_sensor"
        for key in ("current_resources", "resource_intervals", "projection_state"):
            assert instance.get_latest_materialization_event(dg.AssetKey(key)).run_id == second
        latest = instance.get_latest_materialization_event(dg.AssetKey("current_resources"))
        assert latest.asset_materialization.metadata["live"].value == 1
    rt.close()
