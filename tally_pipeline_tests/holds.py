"""A synchronisation hook for tests that prove where work runs: a step wrapped in ``Held`` records whether
it ran on an event loop and in which thread, and (when asked) waits until the test releases it. A test
then checks what the rest of the program does *while* the step is provably in progress, instead of
timing it. The wait's bound is a failure detector, not a measurement."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

NEVER = 120.0  # a wait that ends at once when the behaviour is right; reached only when it is wrong


def on_a_loop() -> bool:
    """Whether the calling thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Held:
    """Wraps a step: records where each call ran, and holds it until ``release`` is set (``hold``)."""

    def __init__(self, step: Callable[..., Any], *, hold: bool):
        self.step = step
        self.hold = hold
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()  # a call has come back (or raised) after its release
        self.on_loop: list[bool] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.on_loop)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.on_loop.append(on_a_loop())
            self.threads.append(threading.current_thread().name)
        self.entered.set()
        try:
            if self.hold:
                assert self.release.wait(NEVER), "the test never released the held step"
            return self.step(*args, **kwargs)
        finally:
            self.returned.set()
