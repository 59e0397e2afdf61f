"""A small tmpfs of its own for a test that needs a disk that fills (mounted as root, unmounted after)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(size_bytes: int) -> Iterator[Path]:
    """A directory on a tmpfs of ``size_bytes``; skips when mounting is not permitted (fails under CI=true)."""
    where = Path(tempfile.mkdtemp(prefix="tally-tmpfs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        where.rmdir()
        why = f"cannot mount a tmpfs to fill (needs root): {(done.stderr or done.stdout).strip()}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)
        if os.path.ismount(where):  # something still holds it open: detach it, it goes when released
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        where.rmdir()


def free_bytes(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize
