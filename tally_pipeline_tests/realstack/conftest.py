"""One real control plane per test session: installed once (cached), brought up, stopped and dropped after.

Without MariaDB the tier is skipped, except under ``CI=true``, where that is a failure; a bring-up that fails
fails every test of the tier with the service's own error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tally_pipeline_tests.rabbit import reachable as rabbit_reachable
from tally_pipeline_tests.realstack.install import ensure_installed
from tally_pipeline_tests.realstack.stack import Stack, mariadb_reachable, running_stack

pytestmark = [pytest.mark.realstack, pytest.mark.slow]


def _missing(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and the realstack tier cannot run: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for problem in (mariadb_reachable(), rabbit_reachable()):
        if problem:
            _missing(problem)

    def progress(message: str) -> None:
        print(f"realstack: {message}", file=sys.stderr, flush=True)

    venvs = ensure_installed(progress)
    root: Path = tmp_path_factory.mktemp("realstack")
    with running_stack(venvs, root, progress) as up:
        progress(up.summary())
        yield up
