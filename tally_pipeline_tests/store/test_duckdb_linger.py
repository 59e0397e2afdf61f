"""The embedded DuckDB file: open for a moment after its last use, closed for other processes after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tally_pipeline.store import open_store
from tally_pipeline.store.duckdb.store import SharedFile
from tally_pipeline_tests.faults import wait_until

OPEN_ONCE = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"  # no retry: fails if the file is held


def _other_process_opens(path: Path) -> bool:
    return subprocess.run([sys.executable, "-c", OPEN_ONCE, str(path)], capture_output=True).returncode == 0


def _shared(path: Path) -> SharedFile:
    return SharedFile.of(str(path))


def test_the_file_stays_open_between_units_then_closes_by_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A linger longer than any pause between two statements, whatever the machine's speed: the next
    # unit reuses the connection. Then a short one, so the last unit's release is followed by a close.
    monkeypatch.setattr(SharedFile, "linger_s", 3600.0)
    path = tmp_path / "tally.duckdb"
    store = open_store(f"duckdb://{path}")
    shared = _shared(path)
    store.query("SELECT 1")
    opened = shared._con
    assert opened is not None  # lingering: the next unit reuses it
    store.query("SELECT 2")
    assert shared._con is opened
    monkeypatch.setattr(SharedFile, "linger_s", 0.05)
    store.query("SELECT 3")  # its release wakes the closer thread, which now waits the short linger
    wait_until(lambda: shared._con is None, "the idle file to close", timeout=60)
    wait_until(lambda: shared._closer is None, "the closer thread to end with it", timeout=60)
    assert _other_process_opens(path)
    store.close()


def test_closing_the_store_releases_the_file_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A linger longer than any test: the file is held until close() whatever the machine's speed (starting the
    # other process and importing duckdb took over a second under load), so close() alone releases it.
    monkeypatch.setattr(SharedFile, "linger_s", 3600.0)
    path = tmp_path / "tally.duckdb"
    store = open_store(f"duckdb://{path}")
    store.query("SELECT 1")
    assert not _other_process_opens(path)  # held: DuckDB admits one process
    store.close()
    assert _other_process_opens(path)


def test_a_connection_held_long_enough_closes_when_next_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tally.duckdb"
    store = open_store(f"duckdb://{path}")
    monkeypatch.setattr(SharedFile, "max_hold_s", 0.0)  # every release is past the hold
    store.query("SELECT 1")
    assert _shared(path)._con is None and _other_process_opens(path)
    store.close()
