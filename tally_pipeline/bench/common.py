"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tally_pipeline.core.errors import InputError, PlatformError


class ServeError(PlatformError, RuntimeError):
    """A ``tally serve`` a benchmark started did not come up or failed; the message quotes its log."""


class BenchOptionError(InputError, ValueError):
    """A benchmark cannot run as its options ask; the message names the option to change."""


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` fall (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@contextmanager
def timer() -> Iterator[list[float]]:
    """``with timer() as t: …`` then ``t[0]`` is the elapsed seconds."""
    box = [0.0]
    start = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - start


@contextmanager
def api_process(database: str, *, config: Path | None = None, workers: int = 1) -> Iterator[str]:
    """``tally serve`` in its own process (and process group) on a free loopback port; yields its URL."""
    import httpx

    port = free_port()
    args = [sys.executable, "-m", "tally_pipeline", "serve", "--database", database,
            "--port", str(port), "--log-level", "warning", "--workers", str(workers)]
    if config is not None:
        args += ["--config", str(config)]
    proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise ServeError(f"tally serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServeError("tally serve did not answer /healthz within 60 s; is the database up and migrated?")
            time.sleep(0.1)  # waiting for an external process to come up, not synchronising a test
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
