"""A throw-away PostgreSQL server of the test's own, which the test may stop, crash and start again.

The machine's shared server (127.0.0.1:5432) serves everyone's tests and is never restarted. This one
lives in a fresh directory under the system temp dir (the postgres user must be able to reach it, which
pytest's root-only tmp_path would not allow), listens on a free loopback port, and is removed at the end.
``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tally_pipeline.bench.common import free_port


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH")


class PrivatePostgres:
    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="tally-private-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown; ``immediate``: a crash (no checkpoint, recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
