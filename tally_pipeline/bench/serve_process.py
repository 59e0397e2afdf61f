"""``tally serve`` as a separate process that a test or a benchmark can start, kill and start again.

The process runs in its own process group (so a signal reaches uvicorn and nothing else) on a fixed
loopback port chosen up front, so a restarted API answers at the same URL. Its output goes to a log
file, never to a pipe nobody reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from tally_pipeline.bench.common import ServeError as ServeError  # raised here too; defined beside api_process
from tally_pipeline.bench.common import free_port


class ServeProcess:
    """One ``tally serve`` on 127.0.0.1:``port`` against ``database``."""

    def __init__(
        self,
        database: str,
        *,
        port: int | None = None,
        tokens_file: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        log_level: str = "warning",
        env: Mapping[str, str] | None = None,
    ):
        self.database = database
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tokens_file = tokens_file
        self.config = config
        self.log_level = log_level
        self.env = None if env is None else dict(env)
        self._own_log = log_path is None  # a log made here is removed when the server is done with
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="tally-serve-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ServeError("the API process is not running")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, wait: bool = True, timeout: float = 60.0, healthy: bool = True) -> ServeProcess:
        """Start the process; with ``wait``, return once it answers ``/healthz`` (200, or any answer when
        ``healthy`` is False: the database may be down on purpose)."""
        if self.alive():
            raise ServeError(f"the API is already running (pid {self.pid})")
        args = [sys.executable, "-m", "tally_pipeline", "serve", "--database", self.database,
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", self.log_level]
        if self.tokens_file is not None:
            args += ["--tokens-file", str(self.tokens_file)]
        if self.config is not None:
            args += ["--config", str(self.config)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=self.env)
        if wait:
            self.wait_ready(timeout=timeout, healthy=healthy)
        return self

    def wait_ready(self, *, timeout: float = 60.0, healthy: bool = True) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                if not self.alive():
                    raise ServeError(f"tally serve exited with {self.proc.returncode if self.proc else None}: {self.log_tail()}")
                try:
                    status = http.get(f"{self.url}/healthz").status_code
                    if status == 200 or not healthy:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ServeError(f"tally serve did not answer /healthz within {timeout:.0f} s: {self.log_tail()}")
                time.sleep(0.05)  # polling an external process until it listens, not synchronising a test

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the server's process group."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL: no shutdown, no flush, the way a crash or the OOM killer ends it. Returns the exit status."""
        self.signal(signal.SIGKILL)
        return self._reap(10.0)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (uvicorn finishes in-flight requests), then SIGKILL if it lingers."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self._reap(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def _reap(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def rss_kib(self) -> int:
        """Resident set size of the server process (``VmRSS`` in /proc), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise ServeError(f"no VmRSS for pid {self.pid}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if self._own_log:
                self.log_path.unlink(missing_ok=True)
