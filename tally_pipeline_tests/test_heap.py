"""``settle_heap``: what ``tally serve`` and ``tally collect`` do to the garbage collector before they
start (in a process of its own, so the test process keeps its collector as it was)."""

from __future__ import annotations

import json
import subprocess
import sys

from tally_pipeline.heap import YOUNG_THRESHOLD

_PROBE = """
import gc, json, sys, weakref
from tally_pipeline.heap import settle_heap

before = gc.get_threshold()
settle_heap(*json.loads(sys.argv[1]))
after = gc.get_threshold()
frozen = gc.get_freeze_count()

class Node:
    pass

# A garbage cycle made after settling, then only ordinary allocations: the collector must find it on its
# own (no gc.collect()), at its new threshold.
cycle = Node()
cycle.me = cycle
collected = []
weakref.finalize(cycle, collected.append, True)
del cycle
keep = [[] for _ in range(3 * after[0])]
print(json.dumps({"before": before, "after": after, "frozen": frozen, "collected": bool(collected),
                  "enabled": gc.isenabled()}))
"""


def _probe(*args: int | None) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_settle_heap_freezes_the_startup_heap_and_collects_less_often_but_still_collects() -> None:
    report = _probe()  # as tally serve settles
    assert report["after"] == [YOUNG_THRESHOLD, *report["before"][1:]]
    assert report["before"][0] < YOUNG_THRESHOLD
    assert report["frozen"] > 1000  # the modules and the objects made at startup
    assert report["enabled"]
    assert report["collected"]  # a cycle made later is still collected, without asking


def test_settle_heap_without_a_threshold_only_freezes() -> None:
    report = _probe(None)  # as tally collect settles: its deliveries leave garbage cycles to collect soon
    assert report["after"] == report["before"]
    assert report["frozen"] > 1000
    assert report["enabled"] and report["collected"]
