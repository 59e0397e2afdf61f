"""What every ``tally bench …`` prints: its measurements as JSON, with the machine's load average taken
before the benchmark started and after it finished, so a figure measured on a busy machine says so."""

from __future__ import annotations

import json
import os
from typing import Any

import click

_BEFORE = "tally.bench.load_before"


def record_load_before() -> None:
    """The ``bench`` group's callback: runs before the chosen benchmark does."""
    click.get_current_context().meta[_BEFORE] = _load()


def print_report(report: dict[str, Any]) -> None:
    """Print a benchmark's report with ``load_average``: ``before`` and ``after`` are the 1, 5 and 15 minute
    averages (``before`` is absent when the benchmark was called outside the ``bench`` group)."""
    load: dict[str, Any] = {"after": _load(), "cpus": os.cpu_count()}
    before = click.get_current_context().meta.get(_BEFORE)
    if before is not None:
        load = {"before": before, **load}
    click.echo(json.dumps({**report, "load_average": load}, indent=2))


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]
