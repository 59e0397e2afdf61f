"""``docs/openapi.yaml`` stays equal to the app: same routes, every documented answer produced and matching,
and schemathesis finds no request the spec allows that the app answers otherwise than the spec says."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection, positive_data_acceptance
from starlette.testclient import TestClient

from tally_pipeline.api.quota import DeadLetterQuota
from tally_pipeline.store import Store, open_store
from tally_pipeline.store.postgres.store import PostgresStore
from tally_pipeline_tests.api.openapi_spec import (
    SPEC_PATH,
    Answer,
    app_operations,
    check_answer,
    check_templated,
    spec,
    spec_operations,
)
from tally_pipeline_tests.api_setup import ALL, SIM_CLOUD, bearer, build_api, closed_port, token_for
from tally_pipeline_tests.collector_api import volume_event

pytestmark = pytest.mark.slow  # a real process or a long property search per test


@pytest.fixture(name="store", scope="module")
def module_wide_store(module_store: Store) -> Store:
    """This module's tests share one store per backend (``module_store``, api/conftest.py)."""
    return module_store


def test_the_spec_describes_exactly_the_routes_the_app_serves() -> None:
    with open_store("duckdb://:memory:") as store:
        assert app_operations(build_api(store).app) == spec_operations()


def test_the_spec_is_a_valid_openapi_3_1_document() -> None:
    doc = spec()
    assert doc["openapi"].startswith("3.1")
    loaded = schemathesis.openapi.from_path(SPEC_PATH)
    loaded.validate()  # against the OpenAPI 3.1 meta-schema
    assert {(op.path, op.method.upper()) for op in (r.ok() for r in loaded.get_all_operations())} == spec_operations()


def documented_answers() -> set[tuple[str, str, int]]:
    return {
        (path, method.upper(), int(status))
        for path, item in spec()["paths"].items()
        for method, op in item.items()
        for status in op["responses"]
    }


@pytest.fixture
def unreachable_store() -> Iterator[Store]:
    """A Postgres store whose server refuses connections: every unit of work fails fast as unavailable."""
    s = PostgresStore(f"postgresql://postgres@127.0.0.1:{closed_port()}/nowhere", timeout=0.2)
    try:
        yield s
    finally:
        s.close()


def test_every_documented_answer_is_produced_and_matches_the_spec(store: Store, unreachable_store: Store) -> None:
    api = build_api(store, max_body_bytes=32 * 1024)
    down = TestClient(build_api(unreachable_store).app)
    seen: set[tuple[str, str, int]] = set()
    client = TestClient(api.app)
    reader, admin, writer = (bearer(token_for(s)) for s in ("read", "admin", "ingest:*"))
    everything = bearer(ALL)

    def call(http: TestClient, method: str, path: str, expect: int, **kwargs) -> dict:
        response = http.request(method, path, **kwargs)
        assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:300]}"
        seen.add(check_answer(method, path, response))
        return response.json() if response.headers["content-type"].startswith("application/json") else {}

    # POST /v1/events
    call(client, "POST", "/v1/events", 200, headers=writer,
         json={"events": [volume_event(1), volume_event(1), {"colour": "red"}, volume_event(2, resource_id="a/b")]})
    call(client, "POST", "/v1/events", 200, headers=writer, json={"events": [volume_event(1, project_id="changed")]})
    call(client, "POST", "/v1/events", 400, headers=writer, content=b"{not json")
    call(client, "POST", "/v1/events", 400, headers=writer, json=[1, 2])
    call(client, "POST", "/v1/events", 401, json={"events": []})
    call(client, "POST", "/v1/events", 401, headers={"Authorization": "Basic abc"}, json={"events": []})
    call(client, "POST", "/v1/events", 403, headers=reader, json={"events": []})
    call(client, "POST", "/v1/events", 413, headers=writer, json={"events": [None] * 1001})
    call(client, "POST", "/v1/events", 413, headers=writer, content=b" " * (33 * 1024))
    call(down, "POST", "/v1/events", 503, headers=writer, json={"events": [volume_event(3)]})
    # POST /v1/event
    call(client, "POST", "/v1/event", 201, headers=writer, json=volume_event(4))
    call(client, "POST", "/v1/event", 200, headers=writer, json=volume_event(4))
    assert call(client, "POST", "/v1/event", 200, headers=writer, json=volume_event(4, resource_id="x"))["conflict"] is True
    call(client, "POST", "/v1/event", 400, headers=writer, json=volume_event(5, occurred_at="yesterday"))
    call(client, "POST", "/v1/event", 400, headers=writer, content=b"\xff\xfe")
    call(client, "POST", "/v1/event", 401, json=volume_event(5))
    call(client, "POST", "/v1/event", 403, headers=admin, json=volume_event(5))
    call(client, "POST", "/v1/event", 413, headers=writer, content=b"[" + b" " * (33 * 1024) + b"]")
    call(down, "POST", "/v1/event", 503, headers=writer, json=volume_event(5))
    # GET /v1/rejected
    page = call(client, "GET", "/v1/rejected?limit=2", 200, headers=reader)
    assert page["next_cursor"] is not None
    call(client, "GET", f"/v1/rejected?cursor={page['next_cursor']}&reason=invalid_json", 200, headers=reader)
    call(client, "GET", "/v1/rejected?limit=0", 400, headers=reader)
    call(client, "GET", "/v1/rejected?cursor=nonsense", 400, headers=reader)
    call(client, "GET", "/v1/rejected?since=yesterday", 400, headers=reader)
    call(client, "GET", "/v1/rejected", 401)
    call(client, "GET", "/v1/rejected", 403, headers=admin)
    call(down, "GET", "/v1/rejected", 503, headers=reader)
    # a token over its dead-letter rate: 429 on both ingest routes
    tight = build_api(store)
    tight.ctx.dead_letter_quota = DeadLetterQuota(1024, clock=lambda: 0.0)
    flood = TestClient(tight.app)
    call(flood, "POST", "/v1/events", 200, headers=writer, json={"events": [{"junk": "x" * 2000}]})
    call(flood, "POST", "/v1/events", 429, headers=writer, json={"events": []})
    call(flood, "POST", "/v1/event", 429, headers=writer, json=volume_event(9))
    # GET /v1/rejected/{id}/raw
    call(client, "GET", f"/v1/rejected/{page['rejected'][0]['id']}/raw", 200, headers=reader)
    call(client, "GET", "/v1/rejected/999999999/raw", 404, headers=reader)
    call(client, "GET", "/v1/rejected/1/raw", 401)
    call(client, "GET", "/v1/rejected/1/raw", 403, headers=admin)
    call(down, "GET", "/v1/rejected/1/raw", 503, headers=reader)
    # the resource routes
    nul = quote("nul\x00")
    for leaf in ("events", "lifecycle"):
        call(client, "GET", f"/v1/resources/c1/volume/a/b/{leaf}", 200, headers=reader)
        call(client, "GET", f"/v1/resources/c1/volume/vol-1/{leaf}", 200, headers=everything)
        call(client, "GET", f"/v1/resources/c1/volume/{nul}/{leaf}", 400, headers=reader)
        call(client, "GET", f"/v1/resources/c1/volume/nothing/{leaf}", 404, headers=reader)
        call(client, "GET", f"/v1/resources/c1/volume/vol-1/{leaf}", 401)
        call(client, "GET", f"/v1/resources/c1/volume/vol-1/{leaf}", 403, headers=writer)
        call(down, "GET", f"/v1/resources/c1/volume/vol-1/{leaf}", 503, headers=reader)
    # GET /v1/inventory
    first = call(client, "GET", "/v1/inventory?limit=1", 200, headers=reader)
    assert first["next_cursor"] is not None
    call(client, "GET", f"/v1/inventory?limit=1&cursor={first['next_cursor']}", 200, headers=reader)
    call(client, "GET", "/v1/inventory?as_of=2024-05-01T10:00:00%2B02:00&cloud=c1", 200, headers=reader)
    call(client, "GET", "/v1/inventory?limit=1001", 400, headers=reader)
    call(client, "GET", "/v1/inventory", 401)
    call(client, "GET", "/v1/inventory", 403, headers=admin)
    call(down, "GET", "/v1/inventory", 503, headers=reader)
    # GET /v1/usage (the volumes above are pending usage: no cycle has posted them)
    usage = call(client, "GET", "/v1/usage?include=pending&group=day&limit=1", 200, headers=reader)
    assert usage["usage"] and usage["usage"][0]["provisional"] is True and usage["next_cursor"] is not None
    call(client, "GET", f"/v1/usage?include=pending&group=day&cursor={usage['next_cursor']}", 200, headers=reader)
    call(client, "GET", "/v1/usage?group=month", 200, headers={**reader, "Accept": "text/csv"})
    call(client, "GET", "/v1/usage?from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z", 400, headers=reader)
    call(client, "GET", "/v1/usage?group=week", 400, headers=reader)
    call(client, "GET", "/v1/usage?cursor=nonsense", 400, headers=reader)
    call(client, "GET", "/v1/usage", 401)
    call(client, "GET", "/v1/usage", 403, headers=admin)
    call(down, "GET", "/v1/usage", 503, headers=reader)
    # GET /v1/usage/{cloud}/{project_id}/current
    current = call(client, "GET", "/v1/usage/c1/p1/current", 200, headers=reader)
    assert current["month"] and isinstance(current["balances"], list)
    call(client, "GET", f"/v1/usage/c1/{nul}/current", 400, headers=reader)
    call(client, "GET", "/v1/usage/c1/p1/current", 401)
    call(client, "GET", "/v1/usage/c1/p1/current", 403, headers=admin)
    call(client, "GET", "/v1/usage/c1/a%2Fb/current", 404, headers=reader)
    call(down, "GET", "/v1/usage/c1/p1/current", 503, headers=reader)
    # GET /v1/statements/{cloud}/{month} (nothing stated here: the month answers stated false)
    month = call(client, "GET", "/v1/statements/c1/2026-11", 200, headers=reader)
    assert month["stated"] is False and month["statements"] == []
    call(client, "GET", "/v1/statements/c1/2026-11?versions=all&project_id=p1", 200,
         headers={**reader, "Accept": "text/csv"})
    call(client, "GET", "/v1/statements/c1/2026-13", 400, headers=reader)
    call(client, "GET", "/v1/statements/c1/2026-11?versions=some", 400, headers=reader)
    call(client, "GET", "/v1/statements/c1/2026-11", 401)
    call(client, "GET", "/v1/statements/c1/2026-11", 403, headers=admin)
    call(client, "GET", "/v1/statements/a%2Fb/2026-11", 404, headers=reader)
    call(down, "GET", "/v1/statements/c1/2026-11", 503, headers=reader)
    # POST /internal/sync/{cloud}, GET /internal/sync/{cloud}/runs/{run_id}
    started = call(client, "POST", f"/internal/sync/{SIM_CLOUD}", 202, headers=admin)
    runs = f"/internal/sync/{SIM_CLOUD}/runs"
    run = call(client, "GET", f"{runs}/{started['run_id']}?wait=60", 200, headers=admin)
    assert run["status"] in ("succeeded", "partial") and run["cloud"] == SIM_CLOUD
    run = call(client, "POST", f"/internal/sync/{SIM_CLOUD}?wait=60", 200, headers={**admin, "Idempotency-Key": "k-1"})
    assert run["status"] in ("succeeded", "partial")
    call(client, "POST", f"/internal/sync/{SIM_CLOUD}?wait=61", 400, headers=admin)
    call(client, "POST", f"/internal/sync/{SIM_CLOUD}", 400, headers={**admin, "Idempotency-Key": "k" * 256})
    store.run(lambda uow: uow.execute("INSERT INTO sync_locks (cloud, run_id, acquired_at) VALUES (%s, %s, %s)",
                                      (SIM_CLOUD, "held-by-test", datetime.now(UTC))))
    assert call(client, "POST", f"/internal/sync/{SIM_CLOUD}", 409, headers=admin)["run_id"] == "held-by-test"
    call(client, "POST", "/internal/sync/elsewhere", 404, headers=admin)
    call(client, "POST", f"/internal/sync/{SIM_CLOUD}", 401)
    call(client, "POST", f"/internal/sync/{SIM_CLOUD}", 403, headers=reader)
    call(down, "POST", f"/internal/sync/{SIM_CLOUD}", 503, headers=admin)
    call(client, "GET", f"{runs}/{run['run_id']}?wait=x", 400, headers=admin)
    call(client, "GET", f"{runs}/no-such-run", 404, headers=admin)
    call(client, "GET", f"{runs}/{run['run_id']}", 401)
    call(client, "GET", f"{runs}/{run['run_id']}", 403, headers=reader)
    call(down, "GET", f"{runs}/{run['run_id']}", 503, headers=admin)
    # operations
    call(client, "GET", "/healthz", 200)
    call(down, "GET", "/healthz", 503)
    call(client, "GET", "/metrics", 200)

    assert seen == documented_answers(), f"documented but never produced: {sorted(documented_answers() - seen)}"


# --- schemathesis: requests generated from the spec ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_generated_requests_get_documented_answers(store: Store, mode: GenerationMode) -> None:
    """Requests generated from docs/openapi.yaml by schemathesis: valid ones, and ones that break the spec
    (bad limits, timestamps, types, missing bodies). Never a 500, never an answer the spec does not describe."""
    _exercise_all(store, mode)


def _exercise_all(store: Store, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_path(SPEC_PATH)
    schema.app = build_api(store).app
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {(op.path, op.method.upper()) for op in operations} == spec_operations()
    for op in operations:
        if mode is GenerationMode.NEGATIVE and not (op.body or any(True for _ in op.iter_parameters())):
            continue  # nothing in the request can break the spec
        _exercise(op, mode)


def _exercise(op, mode: GenerationMode) -> None:
    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def answers_as_documented(case) -> None:
        # Item rules beyond the spec (size schemas, verbs) may reject a valid-looking item in a 200, and any
        # JSON item is answered for, so the two data-acceptance checks don't apply; the others all do.
        response = case.call_and_validate(
            base_url="http://127.0.0.1:8080",
            headers=bearer(ALL),
            excluded_checks=[negative_data_rejection, positive_data_acceptance],
        )
        # Our own oracle too: jsonschema's 2020-12 validator with formats and the if/then item rules.
        headers = {name: ", ".join(values) for name, values in response.headers.items()}
        check_templated(case.method, op.path, Answer(response.status_code, headers, response.content))

    answers_as_documented()
