"""One Runtime per (config file, database) and process: the config is read and validated, the store (a
Postgres pool, or a DuckDB file opened per unit of work) is shared by every resource, sensor tick and
run step of the process, and closed when the process exits.

A cloud whose entry is invalid is set aside, not fatal (``load_config(isolate_clouds=True)``): the
code location still loads, the other clouds keep their schedules, syncs and alert sensors, and the
bad cloud's syncs fail at once with the reason.

The config file is reread when it changes (its modification time, size or inode), so a long-lived
process — the code server evaluating the sensors — reads the same generation of the file as each
new run process: an edited threshold applies to the next sensor tick and the next run alike. A file
that no longer loads fails every reader with its reason (never a silent fallback to the old one).
What the file cannot change without a reload is the code location's shape (its cloud partitions,
schedules): ``config_changes`` says when that is out of date.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from tally_pipeline.config import CONFIG_ENV
from tally_pipeline.runtime import Runtime

# A code location describes one tally database (two with a separate ledger); a test process describes
# a new one per test. Beyond a handful, the least recently used is closed, so a long test session does
# not keep a Postgres pool open per test database.
KEPT = 4

Signature = tuple[int, int, int] | None


@dataclass
class _Entry:
    runtime: Runtime
    signature: Signature


_lock = threading.Lock()
_runtimes: OrderedDict[tuple[str | None, str | None], _Entry] = OrderedDict()
# Runtimes replaced by a newer config generation: another thread may still be using them, so they
# are closed when the process exits, not at once.
_retired: list[Runtime] = []


def file_signature(path: str | None) -> Signature:
    """What changes when the config file is edited or replaced: modification time, size, inode."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None  # gone: loading it again says so
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def runtime_for(config_path: str | None, database: str | None = None) -> Runtime:
    """The process's runtime for ``config_path`` (None: ``$TALLY_CONFIG``) with ``database`` overriding its
    own, for the config file as it is now."""
    # keyed by the file actually read, so a test that points $TALLY_CONFIG elsewhere gets its own
    key = (config_path or os.environ.get(CONFIG_ENV) or None, database or None)
    signature = file_signature(key[0])
    with _lock:
        entry = _runtimes.get(key)
        if entry is None or entry.signature != signature:
            fresh = Runtime.load(key[0], database=key[1], isolate_clouds=True)  # raises: the new file's reason
            if entry is not None:
                if fresh.config.database == entry.runtime.config.database:
                    fresh.share_store_of(entry.runtime)  # same database: keep the pool, only the settings change
                _retired.append(entry.runtime)
            entry = _runtimes[key] = _Entry(fresh, signature)
            while len(_runtimes) > KEPT:
                _, oldest = _runtimes.popitem(last=False)
                oldest.runtime.close()
        _runtimes.move_to_end(key)
        return entry.runtime


def config_changes(config_path: str | None, loaded_clouds: list[str]) -> str | None:
    """What the config file's clouds now differ from the clouds the code location was loaded with, as one
    line; None when they agree. Only a reload of the code location applies such a change."""
    current = set(runtime_for(config_path).config.cloud_names())
    added, removed = sorted(current - set(loaded_clouds)), sorted(set(loaded_clouds) - current)
    if not added and not removed:
        return None
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
    return ("config changed: clouds " + "; ".join(parts)
            + " — reload the code location (Deployment → Reload) to schedule and sync them")


@atexit.register
def close_all() -> None:
    with _lock:
        while _runtimes:
            _, entry = _runtimes.popitem()
            entry.runtime.close()
        while _retired:
            _retired.pop().close()
