"""One real control plane per test session: installed once (cached), brought up, stopped and dropped after.

Without MariaDB the tier is skipped, except under ``CI=true``, where that is a failure; a bring-up that fails
fails every test of the tier with the service's own error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tally_pipeline_tests.rabbit import reachable as rabbit_reachable
from tally_pipeline_tests.realstack.install import ensure_installed
from tally_pipeline_tests.realstack.product import Product, running_product
from tally_pipeline_tests.realstack.stack import Stack, mariadb_reachable, running_stack

if TYPE_CHECKING:
    from tally_pipeline_tests.conftest import PostgresDatabases

pytestmark = [pytest.mark.realstack, pytest.mark.slow]


def _missing(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and the realstack tier cannot run: {why}", pytrace=False)
    pytest.skip(why)


def _one_group(session: pytest.Session) -> None:
    """Under xdist the tier must be one loadgroup: split over workers, each would bring up a control plane
    of its own and the scenarios, which build on each other in file order, would each see a part."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    outside = [item.nodeid for item in session.items
               if item.get_closest_marker("realstack") and not item.nodeid.endswith("@realstack")]
    if outside:
        pytest.fail(f"the realstack tier ran outside its xdist group ({outside[0]}): run it with `--dist loadgroup` "
                    "(pyproject's addopts) on a pytest that keeps xdist's group suffix", pytrace=False)


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _one_group(request.session)
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


@pytest.fixture(scope="session")
def product(stack: Stack, pg_databases: PostgresDatabases,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Product]:
    """tally itself on the stack: its API on a Postgres database of its own and its collector on the stack's
    bus, listening from before the scenarios change anything."""
    with running_product(stack, tmp_path_factory.mktemp("tally"), pg_databases.create()) as up:
        yield up
