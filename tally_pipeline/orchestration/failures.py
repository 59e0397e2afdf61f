"""Run failures, check results and sensor ticks that lead with their cause.

An exception escaping an asset reaches the UI as Dagster's "Error occurred while executing op …"
with the real error at the bottom, below a trace; a ``dg.Failure`` is shown by its description.
The errors an operator must act on — the database (its driver's message, redacted by the store), the
config — become one with the cause as its first line; the original stays attached as its cause.

A sensor or a check that cannot read the store does not raise either (Dagster would put its own
wrapper first, and a check would keep its last result): it reports what it could not do, the cause
first (``unreadable``), and says so in the log once per change of that state, not on every attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import dagster as dg

from tally_pipeline.config import ConfigError
from tally_pipeline.redaction import redact
from tally_pipeline.services.errors import UnknownCloud
from tally_pipeline.store.errors import StoreError

T = TypeVar("T")

#: What keeps a sensor or check from reading the store: the database (down, refusing, busy) or the config.
UNREADABLE: tuple[type[Exception], ...] = (StoreError, ConfigError)


def cause(exc: BaseException) -> str:
    """The error as one line, its class first, credentials redacted."""
    return redact(" ".join(f"{type(exc).__name__}: {exc}".split()))


@contextmanager
def cause_first() -> Iterator[None]:
    """Turn a store or config error raised in the block into a ``dg.Failure`` whose first line is its cause."""
    try:
        yield
    except (StoreError, ConfigError, UnknownCloud) as exc:
        raise dg.Failure(redact(f"{type(exc).__name__}: {exc}")) from exc


def unreadable_check(asset: str, name: str, exc: BaseException, **metadata: Any) -> dg.AssetCheckEvaluation:
    """A check that could not be evaluated: failed (red, never its last pass), the cause as its first line."""
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(asset), check_name=name, passed=False, severity=dg.AssetCheckSeverity.ERROR,
        description=f"{cause(exc)}\nnot evaluated: the store could not be read; this check is not passing "
                    "until it can be",
        metadata={"state": "unreadable", "cause": cause(exc), **metadata})


def outage_fingerprint(exc: BaseException) -> str:
    """What a cursor remembers of an outage: its kind, not its per-attempt details (a wait time, a pid)."""
    return f"unreadable:{type(exc).__name__}"


# sensor -> the outage it last logged (the code server evaluates every tick of a sensor in one process)
_said: dict[str, str] = {}


def outage_skip(context: dg.SensorEvaluationContext, name: str, exc: BaseException) -> dg.SkipReason:
    """The tick of sensor ``name`` that cannot read the store: skipped, the cause first; logged once per outage."""
    if _said.get(name) != outage_fingerprint(exc):
        context.log.error(f"{cause(exc)}\n{name}: nothing done until the store can be read")
        _said[name] = outage_fingerprint(exc)
    return dg.SkipReason(f"{cause(exc)}\nnothing done this tick; the next tick tries again")


def outage_over(context: dg.SensorEvaluationContext, name: str) -> None:
    """Say once that sensor ``name`` reads the store again after ``outage_skip``."""
    if _said.pop(name, None) is not None:
        context.log.info(f"{name}: the store can be read again")


def outage_guarded(context: dg.SensorEvaluationContext, name: str, tick: Callable[[], T]) -> T | dg.SkipReason:
    """Sensor ``name``'s ``tick``, skipped with the cause first while the store cannot be read (``outage_skip``),
    and the outage's end said once when it can again (``outage_over``)."""
    try:
        result = tick()
    except UNREADABLE as exc:
        return outage_skip(context, name, exc)
    outage_over(context, name)
    return result
