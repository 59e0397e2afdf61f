"""The collector client: an fsync'd on-disk buffer in front of ``POST /v1/events``, and its sender.

Importing the package is cheap; ``Collector`` and its errors load on first use, so a module such as
the OpenStack notification mapping can live here without pulling in httpx or SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tally_pipeline.collector.buffer import BufferStatus as BufferStatus
    from tally_pipeline.collector.buffer import buffer_status as buffer_status
    from tally_pipeline.collector.client import Collector as Collector
    from tally_pipeline.collector.client import DrainReport as DrainReport
    from tally_pipeline.collector.client import SendResult as SendResult
    from tally_pipeline.collector.errors import BufferFull as BufferFull
    from tally_pipeline.collector.errors import CollectorAuthError as CollectorAuthError
    from tally_pipeline.collector.errors import CollectorError as CollectorError

_EXPORTS = {
    "Collector": "tally_pipeline.collector.client",
    "SendResult": "tally_pipeline.collector.client",
    "DrainReport": "tally_pipeline.collector.client",
    "BufferStatus": "tally_pipeline.collector.buffer",
    "buffer_status": "tally_pipeline.collector.buffer",
    "BufferFull": "tally_pipeline.collector.errors",
    "CollectorAuthError": "tally_pipeline.collector.errors",
    "CollectorError": "tally_pipeline.collector.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
