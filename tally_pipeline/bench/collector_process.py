"""``tally collect openstack`` as a separate process that a test or a benchmark can start, kill and start again.

Like ``serve_process``: its own process group, its output in a log file, ``/healthz`` and ``/metrics``
on a port chosen up front so a restarted collector answers at the same address.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tally_pipeline.bench.common import free_port
from tally_pipeline.core.errors import CollectorError


class CollectorProcessError(CollectorError):
    pass


class CollectorProcess:
    """One collector: ``tally collect openstack`` with the given options (a config file for the rest)."""

    def __init__(
        self,
        *,
        cloud: str,
        transport_url: str | None,
        api_url: str,
        buffer_dir: str | os.PathLike[str],
        token_file: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        metrics_port: int | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ):
        self.metrics_port = metrics_port or free_port()
        self.url = f"http://127.0.0.1:{self.metrics_port}"
        self.args = [sys.executable, "-m", "tally_pipeline", "collect", "openstack", "--cloud", cloud,
                     "--api-url", api_url, "--buffer-dir", str(buffer_dir),
                     "--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port), *extra_args]
        if transport_url is not None:
            self.args += ["--transport-url", transport_url]
        if token_file is not None:
            self.args += ["--token-file", str(token_file)]
        if config is not None:
            self.args += ["--config", str(config)]
        self.env = {**os.environ, **(env or {})}
        if config is None:
            self.env.pop("TALLY_CONFIG", None)  # the options given are the whole configuration
        self._own_log = log_path is None
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="tally-collector-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise CollectorProcessError("the collector is not running")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, bound: int | None = None, timeout: float = 60.0) -> CollectorProcess:
        """Start it; return once ``/healthz`` answers and, with ``bound``, that many exchanges are bound."""
        if self.alive():
            raise CollectorProcessError(f"the collector is already running (pid {self.pid})")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, env=self.env)
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise CollectorProcessError(f"the collector exited with {self.returncode}: {self.log_tail()}")
            health = self.health()
            if health is not None and (bound is None or len(health.get("bound_exchanges", ())) >= bound):
                return self
            if time.monotonic() > deadline:
                raise CollectorProcessError(f"the collector was not ready within {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.05)  # polling an external process until it is ready, not synchronising a test

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def health(self) -> dict[str, Any] | None:
        """``/healthz``'s JSON (whatever its status code), or None while nothing answers."""
        try:
            health: dict[str, Any] = httpx.get(f"{self.url}/healthz", timeout=2.0).json()
            return health
        except (httpx.HTTPError, ValueError):
            return None

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) → value."""
        text = httpx.get(f"{self.url}/metrics", timeout=5.0).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        """One sample's value, or the sum over the samples whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples().items() if n == name and wanted <= set(ls))

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL: no flush, no ack, the way a crash ends it."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        return self.proc.wait(10)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, then wait for the exit (SIGKILL past ``timeout``). Returns the exit status."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise CollectorProcessError(f"no VmRSS for pid {self.pid}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 4000) -> str:
        return self.log_text()[-n:]

    def __enter__(self) -> CollectorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.alive():
                self.kill()
        finally:
            if self._own_log:
                self.log_path.unlink(missing_ok=True)
