"""The real OpenStack services of the ``realstack`` tier, installed from PyPI into virtualenvs of their own.

They live outside the project's environment (their pins would fight ours: oslo, SQLAlchemy, eventlet) in a
cache keyed by the pinned versions, so a second run installs nothing. Three groups, as the services'
own requirements allow them to share: keystone with placement and nova; glance; cinder with neutron.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: The services of each group; ``locks/<group>.in`` names them with the libraries every group shares, and
#: ``locks/<group>.txt`` pins everything they pull in, resolved as of the day the tier first came up (a
#: transitive release after it, cryptography 51 beside pysaml2's pyOpenSSL cap, broke keystone's db sync).
#: Regenerate a lock with the command at its head; a changed lock changes the cache key.
LOCKS = Path(__file__).with_name("locks")
GROUPS = ("core", "glance", "storage")


class InstallError(RuntimeError):
    """A group of services could not be installed; the message carries the installer's own words."""


def cache_root() -> Path:
    base = os.environ.get("TALLY_REALSTACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tally-pipeline", "realstack")
    return Path(base)


def cache_key() -> str:
    text = "\n".join([sys.version.split()[0], *((LOCKS / f"{g}.txt").read_text() for g in GROUPS)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Two test runs on one machine (CI beside a developer) must not build the same venv at once.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else shutil.which("uv")


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise InstallError(f"{' '.join(cmd[:3])}… exited {done.returncode}:\n{tail}")


def _build(target: Path, lock: Path, log: Path) -> None:
    uv = _uv()
    base_python = getattr(sys, "_base_executable", sys.executable)
    if uv:
        _run([uv, "venv", "--quiet", "--python", base_python, str(target)], log)
        _run([uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), "-r", str(lock)], log)
    else:
        _run([base_python, "-m", "venv", str(target)], log)
        _run([str(target / "bin" / "pip"), "install", "--quiet", "-r", str(lock)], log)


def services(group: str) -> list[str]:
    """The top-level pins of ``group`` (its ``.in`` file), for the progress line."""
    lines = (LOCKS / f"{group}.in").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def ensure_installed(progress: Callable[[str], None] = lambda _msg: None) -> dict[str, Path]:
    """The venv of each group (its root), built once per cache key; a finished venv is marked complete."""
    root = cache_root() / cache_key()
    venvs = {name: root / name for name in GROUPS}
    with _locked(root.parent / f"{root.name}.lock"):
        for name in GROUPS:
            target = venvs[name]
            if (target / ".complete").exists():
                continue
            packages = services(name)
            progress(f"installing {name}: {' '.join(packages)}")
            # Built where it stays (console scripts name their interpreter by path); only a finished
            # venv is marked complete, so an interrupted build is removed and made again.
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            _build(target, LOCKS / f"{name}.txt", root / f"install-{name}.log")
            (target / ".complete").write_text(" ".join(packages) + "\n")
    return venvs

