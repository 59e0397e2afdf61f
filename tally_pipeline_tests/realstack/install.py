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

#: Versions that were brought up together on this kind of machine. Change one and the cache key changes.
COMMON = ("oslo.messaging==18.3.1", "SQLAlchemy==2.1.9", "gunicorn==27.0.1", "PyMySQL==1.1.2")
GROUPS: dict[str, tuple[str, ...]] = {
    "core": ("keystone==30.0.0", "openstack-placement==16.0.0", "nova==34.0.0"),
    "glance": ("glance==33.0.0",),
    "storage": ("cinder==29.0.0", "neutron==29.0.0"),
}


class InstallError(RuntimeError):
    """A group of services could not be installed; the message carries the installer's own words."""


def cache_root() -> Path:
    base = os.environ.get("TALLY_REALSTACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tally-pipeline", "realstack")
    return Path(base)


def cache_key() -> str:
    text = "\n".join([sys.version.split()[0], *COMMON, *(f"{g}:{p}" for g, ps in GROUPS.items() for p in ps)])
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


def _build(target: Path, packages: tuple[str, ...], log: Path) -> None:
    uv = _uv()
    base_python = getattr(sys, "_base_executable", sys.executable)
    if uv:
        _run([uv, "venv", "--quiet", "--python", base_python, str(target)], log)
        _run([uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), *packages, *COMMON], log)
    else:
        _run([base_python, "-m", "venv", str(target)], log)
        _run([str(target / "bin" / "pip"), "install", "--quiet", *packages, *COMMON], log)


def ensure_installed(progress: Callable[[str], None] = lambda _msg: None) -> dict[str, Path]:
    """The venv of each group (its root), built once per cache key; a finished venv is marked complete."""
    root = cache_root() / cache_key()
    venvs = {name: root / name for name in GROUPS}
    with _locked(root.parent / f"{root.name}.lock"):
        for name, packages in GROUPS.items():
            target = venvs[name]
            if (target / ".complete").exists():
                continue
            progress(f"installing {name}: {' '.join(packages)}")
            # Built where it stays (console scripts name their interpreter by path); only a finished
            # venv is marked complete, so an interrupted build is removed and made again.
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            _build(target, packages, root / f"install-{name}.log")
            (target / ".complete").write_text(" ".join(packages) + "\n")
    return venvs

