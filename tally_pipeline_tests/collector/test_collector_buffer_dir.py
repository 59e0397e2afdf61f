"""``tally collect openstack`` started on a buffer directory it cannot use exits at once with one clear line
(non-zero, no traceback): not a directory, under a file, read-only, without permission, or holding a
buffer file it may not write. A real process each time; as root, it runs as ``nobody`` (root passes every
permission check, so a read-only directory would not be read-only to it), through ``setpriv``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY = 65534


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory ``nobody`` may walk into (pytest's own tmp_path is private to root)."""
    made = Path(tempfile.mkdtemp(prefix="tally-buffer-dir-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        for path in (made, *made.rglob("*")):
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(made)


def collect(buffer_dir: Path) -> subprocess.CompletedProcess[str]:
    as_nobody: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no way to take away root's permissions")
        as_nobody = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run(
        [*as_nobody, sys.executable, "-c", "from tally_pipeline.cli import main; main()", "collect", "openstack", "--cloud", "c1",
         "--transport-url", "rabbit://guest:guest@127.0.0.1:9/", "--api-url", "http://127.0.0.1:9",
         "--buffer-dir", str(buffer_dir), "--metrics-port", "0"],
        capture_output=True, text=True, timeout=120, cwd="/", env={**os.environ, "HOME": "/tmp"})


def unusable(place: Path, kind: str) -> Path:
    if kind == "a file":
        (place / "file").write_text("x")
        return place / "file"
    if kind == "under a file":
        (place / "file").write_text("x")
        return place / "file" / "buffer"
    if kind == "read-only":
        (place / "ro").mkdir()
        (place / "ro").chmod(0o555)
        return place / "ro"
    if kind == "under a read-only directory":
        (place / "ro").mkdir()
        (place / "ro").chmod(0o555)
        return place / "ro" / "buffer"
    if kind == "no permission":
        (place / "closed").mkdir()
        (place / "closed").chmod(0o700 if os.geteuid() == 0 else 0o000)  # root's: closed to nobody
        return place / "closed" / "buffer"
    assert kind == "a read-only buffer file"
    (place / "buf").mkdir()
    (place / "buf").chmod(0o777)
    (place / "buf" / "buffer.sqlite3").write_bytes(b"")
    (place / "buf" / "buffer.sqlite3").chmod(0o444)
    return place / "buf"


@pytest.mark.parametrize("kind", ["a file", "under a file", "read-only", "under a read-only directory",
                                  "no permission", "a read-only buffer file"])
def test_an_unusable_buffer_directory_is_one_clear_line(place: Path, kind: str) -> None:
    buffer_dir = unusable(place, kind)
    done = collect(buffer_dir)
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: ") and str(buffer_dir) in error, done.stderr
    assert not any(line.startswith("Error: ") for line in done.stderr.strip().splitlines()[:-1])
