"""Fixtures of the collector tests: an API that follows the ingest contract, served on a loopback socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tally_pipeline_tests.collector_api import ContractAPI, LoopbackServer


@pytest.fixture
def api() -> ContractAPI:
    """The contract API in memory; script its answers, or inspect what it stored, from the test."""
    return ContractAPI()


@pytest.fixture
def server(api: ContractAPI) -> Iterator[LoopbackServer]:
    """``api`` served and listening; stopped when the test ends."""
    with LoopbackServer(api.app) as srv:
        yield srv.start()
