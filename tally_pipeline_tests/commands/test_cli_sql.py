"""`tally sql`: the README's queries as written, read-only on both stores, and a file it never holds while idle."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.cli import main
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline_tests.events import event

README = Path(__file__).resolve().parents[2] / "README.md"


def filled(tmp_path: Path) -> str:
    """A DuckDB file after a sync of a simulated cloud: every table of the README's queries has rows.

    The window is pinned: by default it ends at the current hour, and a sync polling in the first
    settle window (5 min) after it defers what the window's last minutes created, so the inventory
    below depended on the minute the test ran."""
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\nclouds:\n"
                      "  demo: {provider: simulated, seed: 1, start: '2026-01-05T00:00:00Z'}\n")
    synced = CliRunner().invoke(main, ["sync", "demo", "--config", str(config)])
    assert synced.exit_code == 0, synced.output
    return f"duckdb://{tmp_path / 'tally.duckdb'}"


def readme_queries() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^```sql\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert block is not None
    return [q.strip() for q in block.group(1).split(";\n") if q.strip()]


def test_the_readmes_queries_run_as_written(tmp_path: Path) -> None:
    url = filled(tmp_path)
    queries = readme_queries()
    assert len(queries) == 3
    inventory = CliRunner().invoke(main, ["sql", "--database", url, "--format", "csv"], input=queries[0])
    assert inventory.exit_code == 0, inventory.output
    assert inventory.output.splitlines() == ["cloud,resource_type,live", "demo,floating_ip,6", "demo,image,8",
                                             "demo,instance,20", "demo,load_balancer,4", "demo,volume,9"]
    headers = [["interval_no", "start_at", "end_at", "project_id", "flavor"],
               ["cloud", "project_id", "meter", "account", "total"]]
    for query, header in zip(queries[1:], headers, strict=True):
        result = CliRunner().invoke(main, ["sql", "--database", url], input=query)  # a script on stdin
        assert result.exit_code == 0, result.output
        assert result.output.split("\n", 1)[0].split() == header


def test_a_write_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    url = filled(tmp_path)
    before = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM events", "--database", url, "--format", "csv"])
    refused = CliRunner().invoke(main, ["sql", "DELETE FROM events", "--database", url])
    assert refused.exit_code == 1 and "read-only" in refused.output
    after = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM events", "--database", url, "--format", "csv"])
    assert before.output == after.output and int(after.output.splitlines()[1]) > 0


def test_postgres_runs_reads_and_refuses_writes(pg_url: str) -> None:
    with open_store(pg_url, migrate=True) as store:
        Ingestor(store, default_registry()).ingest([event(event_id="e1")], origin="test")
    read = CliRunner().invoke(main, ["sql", "SELECT event_id FROM events", "--database", pg_url, "--format", "csv"])
    assert (read.exit_code, read.output.splitlines()) == (0, ["event_id", "e1"])
    refused = CliRunner().invoke(main, ["sql", "DELETE FROM events", "--database", pg_url])
    assert refused.exit_code == 1 and "read-only transaction" in refused.output
    assert CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM events", "--database", pg_url,
                                     "--format", "csv"]).output.splitlines() == ["n", "1"]


def test_a_file_held_by_another_process_is_waited_for_then_named(tmp_path: Path) -> None:
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    with open_store(url) as store, store.session():  # this process holds the file, as a Dagster step does
        held = subprocess.run([sys.executable, "-m", "tally_pipeline", "sql", "SELECT 1", "--database", url,
                               "--wait", "0"], capture_output=True, text=True, timeout=120)
    assert held.returncode == 1 and "stayed locked by another process" in held.stderr


def _read_until(fd: int, marker: str, deadline: float) -> str:
    seen = ""
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 65536).decode(errors="replace")
    return seen.replace("\r", "")  # the terminal's line ends, and csv's


def test_an_idle_shell_holds_no_lock(tmp_path: Path) -> None:
    """The shell opens the file for each statement only: between them, another process writes freely."""
    url = filled(tmp_path)
    master, slave = pty.openpty()
    shell = subprocess.Popen([sys.executable, "-m", "tally_pipeline", "sql", "--database", url, "--format", "csv"],
                             stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        deadline = time.monotonic() + 120
        _read_until(master, "tally> ", deadline)
        os.write(master, b"SELECT count(*) AS n\n FROM events;\n")
        answer = _read_until(master, "tally> ", deadline)
        assert re.search(r"n\n[1-9]\d*\n", answer), answer
        with open_store(url) as store:  # the shell is open and idle: this process can write
            assert Ingestor(store, default_registry()).ingest([event(event_id="while-idle")], origin="test").stored == 1
            store.close()
        os.write(master, b"SELECT event_id FROM events WHERE event_id = 'while-idle';\n")
        assert "while-idle\n" in _read_until(master, "tally> ", deadline).split("event_id", 1)[-1]
        os.write(master, b".quit\n")
        assert shell.wait(timeout=60) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        os.close(master)


@pytest.mark.slow
def test_an_idle_api_leaves_the_file_to_a_reader(tmp_path: Path) -> None:
    """`tally serve` holds the DuckDB file only while it has work: between requests `tally sql` reads it."""
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    with ServeProcess(database, log_path=tmp_path / "serve.log") as api:
        api.start()
        import httpx

        posted = httpx.post(f"{api.url}/v1/events", json={"events": [event(event_id="via-api")]}, timeout=60)
        assert posted.status_code == 200 and posted.json()["stored"] == 1
        read = subprocess.run([sys.executable, "-m", "tally_pipeline", "sql", "SELECT event_id FROM events",
                               "--database", database, "--format", "csv"], capture_output=True, text=True, timeout=120)
        assert api.alive()
    assert (read.returncode, read.stdout.splitlines()) == (0, ["event_id", "via-api"]), read.stderr
