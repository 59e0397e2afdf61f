"""Long-running processes for end-to-end tests: started in their own session, ready when they say so."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path


class Service:
    """One process whose output is collected by a thread; ``ready`` is set when ``ready_line`` appears."""

    def __init__(self, name: str, command: Sequence[str], *, env: dict[str, str], cwd: Path, ready_line: str | None):
        self.name = name
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._ready_line = ready_line
        # Its own session: dagster processes ignore SIGINT/SIGTERM sent to a script's group otherwise,
        # and the whole tree (run workers, code servers) is stopped together.
        self.proc = subprocess.Popen(list(command), cwd=cwd, env=env, start_new_session=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if ready_line is None:
            self.ready.set()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if self._ready_line is not None and self._ready_line in line:
                self.ready.set()
        self.ready.set()  # exited: wake the waiter, which then sees the process is gone

    def wait_ready(self, timeout: float = 120.0) -> None:
        if not self.ready.wait(timeout) or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} did not become ready: {self.output()[-3000:]}")

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(timeout=10)
