"""What the collector raises. Nothing it buffers is ever dropped to avoid raising one of these."""

from __future__ import annotations

from tally_pipeline.core.errors import CollectorError as CollectorError  # the group; its members are below
from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.redaction import redact


class ApiURLError(ConfigurationError, ValueError):
    """An ingest API address the collector cannot send to."""

    def __init__(self, url: str):
        super().__init__(f"collector.api_url (--api-url) {redact(url)!r} is not an http(s) URL: give the ingest API's "
                         "base URL, e.g. http://tally-api:8080")


class BufferFull(CollectorError):
    """The on-disk buffer is at its limit; the events offered were not buffered (none of them)."""

    def __init__(self, path: str, *, buffered: int, limit: int, offered: int, unit: str = "events"):
        self.path = path
        self.buffered = buffered
        self.limit = limit
        self.offered = offered
        self.unit = unit
        super().__init__(
            f"collector buffer {path} is full: {buffered} {unit} buffered, limit {limit} {unit}; "
            f"refusing {offered} more {unit} (none of them was buffered). "
            "Is the API reachable? See `tally collector status --buffer-dir ...`."
        )


class BufferDiskFull(CollectorError):
    """The disk holding the buffer is full: the events offered were not buffered (none of them). The
    buffer still gives out what it holds (its reserve is freed for that) and takes events again once
    there is room."""

    def __init__(self, path: str, why: str):
        self.path = path
        super().__init__(f"collector buffer {path} refuses new events: {why}. It keeps sending what it holds; "
                         "see `tally collector status --buffer-dir ...`.")


class CollectorAuthError(CollectorError):
    """The API refused the collector's token (401) or its scope (403); sending stops, nothing is lost."""

    def __init__(self, message: str, *, status: int, buffered: int):
        self.status = status
        self.buffered = buffered
        super().__init__(f"{message}; sending stopped, {buffered} events stay buffered")


class BufferUnusable(CollectorError):
    """The buffer directory cannot be used: not a directory, not writable, on a read-only file system."""

    def __init__(self, path: object, why: str):
        self.path = str(path)
        super().__init__(f"the collector buffer directory {path} is not usable: {why}")


class BufferSchemaError(CollectorError):
    """The buffer file was written by a newer collector than this one."""
