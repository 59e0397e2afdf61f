"""Real concurrent processes for the race tests: start them together, collect one result from each."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any

#: Spawned, not forked: each child starts clean, with its own connections and no copied locks.
SPAWN = mp.get_context("spawn")


def run_processes(target: Callable[..., None], args_each: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*args, results)`` in one process per ``args``; each puts one result on ``results``.

    Returns the results in the order they arrived, once every process has exited cleanly.
    """
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(*args, results)) for args in args_each]
    for proc in procs:
        proc.start()
    collected = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return collected
