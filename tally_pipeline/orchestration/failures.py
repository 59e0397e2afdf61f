"""Run failures that lead with their cause.

An exception escaping an asset reaches the UI as Dagster's "Error occurred while executing op …"
with the real error at the bottom, below a trace; a ``dg.Failure`` is shown by its description.
The errors an operator must act on — the database (its driver's message, redacted by the store), the
config — become one with the cause as its first line; the original stays attached as its cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from tally_pipeline.config import ConfigError
from tally_pipeline.redaction import redact
from tally_pipeline.services.errors import UnknownCloud
from tally_pipeline.store.errors import StoreError


@contextmanager
def cause_first() -> Iterator[None]:
    """Turn a store or config error raised in the block into a ``dg.Failure`` whose first line is its cause."""
    try:
        yield
    except (StoreError, ConfigError, UnknownCloud) as exc:
        raise dg.Failure(redact(f"{type(exc).__name__}: {exc}")) from exc
