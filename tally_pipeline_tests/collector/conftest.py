"""Fixtures of the collector tests: an API that follows the ingest contract, served on a loopback socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tally_pipeline_tests.collector_api import ContractAPI, LoopbackServer
from tally_pipeline_tests.rabbit import VHost


@pytest.fixture
def api() -> ContractAPI:
    """The contract API in memory; script its answers, or inspect what it stored, from the test."""
    return ContractAPI()


@pytest.fixture
def server(api: ContractAPI) -> Iterator[LoopbackServer]:
    """``api`` served and listening; stopped when the test ends."""
    with LoopbackServer(api.app) as srv:
        yield srv.start()


@pytest.fixture(scope="session")
def rabbitmq() -> str:
    """The machine's RabbitMQ; skips (or fails under CI=true) when it does not answer."""
    import os

    from tally_pipeline_tests.rabbit import HOST, reachable

    problem = reachable()
    if problem is not None:
        message = f"RabbitMQ not reachable at {HOST} ({problem})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return HOST


@pytest.fixture
def vhost(rabbitmq: str) -> Iterator[VHost]:
    """A RabbitMQ vhost of this test's own (guest may do anything in it), deleted after, pass or fail."""
    from tally_pipeline_tests.rabbit import drop_vhost, make_vhost

    made = make_vhost()
    try:
        yield made
    finally:
        drop_vhost(made)
