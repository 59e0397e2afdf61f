"""One Runtime per (config file, database) and process: the config is read and validated once, the
store (a Postgres pool, or a DuckDB file opened per unit of work) is shared by every resource, sensor
tick and run step of the process, and closed when the process exits.

A cloud whose entry is invalid is set aside, not fatal (``load_config(isolate_clouds=True)``): the
code location still loads, the other clouds keep their schedules, syncs and alert sensors, and the bad
cloud's syncs fail at once with the reason.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict

from tally_pipeline.config import CONFIG_ENV
from tally_pipeline.runtime import Runtime

# A code location describes one tally database (two with a separate ledger); a test process describes
# a new one per test. Beyond a handful, the least recently used is closed, so a long test session does
# not keep a Postgres pool open per test database.
KEPT = 4

_lock = threading.Lock()
_runtimes: OrderedDict[tuple[str | None, str | None], Runtime] = OrderedDict()


def runtime_for(config_path: str | None, database: str | None = None) -> Runtime:
    """The process's runtime for ``config_path`` (None: ``$TALLY_CONFIG``) with ``database`` overriding its own."""
    # keyed by the file actually read, so a test that points $TALLY_CONFIG elsewhere gets its own
    key = (config_path or os.environ.get(CONFIG_ENV) or None, database or None)
    with _lock:
        runtime = _runtimes.get(key)
        if runtime is None:
            runtime = _runtimes[key] = Runtime.load(key[0], database=key[1], isolate_clouds=True)
            while len(_runtimes) > KEPT:
                _, oldest = _runtimes.popitem(last=False)
                oldest.close()
        _runtimes.move_to_end(key)
        return runtime


@atexit.register
def close_all() -> None:
    with _lock:
        while _runtimes:
            _, runtime = _runtimes.popitem()
            runtime.close()
