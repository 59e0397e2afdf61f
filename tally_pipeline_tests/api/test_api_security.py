"""Security of the API: tokens held hashed and compared in constant time, scopes on every route, and no
request parameter ever reaching SQL as anything but a bound parameter."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from tally_pipeline.api import auth
from tally_pipeline.api.auth import TokenBook
from tally_pipeline.store import RejectedRow, Store, open_store
from tally_pipeline_tests.api.openapi_spec import app_operations, check_answer, required_scopes, spec
from tally_pipeline_tests.api_setup import ALL, SIM_CLOUD, TOKENS, bearer, build_api
from tally_pipeline_tests.collector_api import volume_event


@pytest.fixture(name="store", scope="module")
def module_wide_store(module_store: Store) -> Store:
    """This module's tests share one store per backend (``module_store``, api/conftest.py)."""
    return module_store


PLAIN = "plain-secret-0123456789abcdef"
HASHED = "hashed-secret-0123456789abcdef"


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        "tokens:\n"
        f"  - {{name: plain, token: {PLAIN}, scopes: [read]}}\n"
        f"  - {{name: hashed, token_sha256: {hashlib.sha256(HASHED.encode()).hexdigest()}, scopes: ['ingest:*']}}\n"
        "  - {name: third, token: another-secret-0123456789, scopes: [admin]}\n"
    )
    return path


def _reachable(value: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Every object reachable from ``value`` through attributes, slots and containers."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    elif dataclasses.is_dataclass(value):
        children = [getattr(value, f.name) for f in dataclasses.fields(value)]
    else:
        children = list(getattr(value, "__dict__", {}).values())
        children += [getattr(value, s) for s in getattr(type(value), "__slots__", ()) if hasattr(value, s)]
    for child in children:
        yield from _reachable(child, seen)


def test_the_token_book_keeps_no_plaintext_secret(tokens_file: Path) -> None:
    book = TokenBook.load(tokens_file)
    held = list(_reachable(book))
    assert len([v for v in held if isinstance(v, bytes)]) == 3  # one digest per token, nothing else
    for secret in (PLAIN, HASHED, "another-secret-0123456789"):
        for value in held:
            if isinstance(value, str):
                assert secret not in value
            if isinstance(value, bytes):
                assert secret.encode() not in value
    digests = {v for v in held if isinstance(v, bytes)}
    assert digests == {hashlib.sha256(s.encode()).digest() for s in (PLAIN, HASHED, "another-secret-0123456789")}


def test_a_hashed_token_authenticates_by_its_secret_and_never_by_its_digest(tokens_file: Path) -> None:
    book = TokenBook.load(tokens_file)
    assert book.authenticate(HASHED).scopes == frozenset({"ingest:*"})
    assert book.authenticate(PLAIN).scopes == frozenset({"read"})
    assert book.authenticate(hashlib.sha256(HASHED.encode()).hexdigest()) is None
    assert book.authenticate(PLAIN[:-1]) is None and book.authenticate(PLAIN + "x") is None
    assert book.authenticate("") is None


@pytest.mark.parametrize("presented", [PLAIN, HASHED, "another-secret-0123456789", "nobody-knows-me-0000000"])
def test_every_known_digest_is_compared_in_constant_time_whoever_matches(
    tokens_file: Path, monkeypatch: pytest.MonkeyPatch, presented: str
) -> None:
    book = TokenBook.load(tokens_file)
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    book.authenticate(presented)
    # No early exit (the first, last or no token matching costs the same), and only digests are compared.
    assert len(calls) == 3
    assert {a for a, _ in calls} == {hashlib.sha256(presented.encode()).digest()}
    assert all(len(a) == len(b) == 32 for a, b in calls)


# --- scopes on every route ---------------------------------------------------------------------------------

CALLERS: dict[str, dict[str, str]] = {
    "none": {},
    "unknown token": {"Authorization": "Bearer not-a-known-token-000000"},
    "not bearer": {"Authorization": f"Basic {base64.b64encode(b'u:p').decode()}"},
    **{"+".join(sorted(scopes)): bearer(token) for token, scopes in TOKENS.items() if token != ALL},
}


def _requests(n: int, run_id: str = "no-run") -> dict[tuple[str, str], Callable[[], tuple[str, dict[str, Any]]]]:
    """One concrete request per operation of the app, for events of cloud c1 numbered from ``n``
    (``run_id``: a finished sync run of the simulated cloud)."""
    return {
        ("/v1/events", "POST"): lambda: ("/v1/events", {"json": {"events": [volume_event(n)]}}),
        ("/v1/event", "POST"): lambda: ("/v1/event", {"json": volume_event(n)}),
        ("/v1/rejected", "GET"): lambda: ("/v1/rejected", {}),
        ("/v1/rejected/{rejected_id}/raw", "GET"): lambda: ("/v1/rejected/1/raw", {}),
        ("/v1/resources/{cloud}/{resource_type}/{resource_id}/events", "GET"):
            lambda: ("/v1/resources/c1/volume/vol-seed/events", {}),
        ("/v1/resources/{cloud}/{resource_type}/{resource_id}/lifecycle", "GET"):
            lambda: ("/v1/resources/c1/volume/vol-seed/lifecycle", {}),
        ("/v1/inventory", "GET"): lambda: ("/v1/inventory", {}),
        ("/v1/usage", "GET"): lambda: ("/v1/usage?include=pending", {}),
        ("/v1/usage/{cloud}/{project_id}/current", "GET"): lambda: ("/v1/usage/c1/p1/current", {}),
        ("/v1/statements/{cloud}/{month}", "GET"): lambda: ("/v1/statements/c1/2026-11", {}),
        ("/internal/sync/{cloud}", "POST"): lambda: (f"/internal/sync/{SIM_CLOUD}", {}),
        ("/internal/sync/{cloud}/runs/{run_id}", "GET"): lambda: (f"/internal/sync/{SIM_CLOUD}/runs/{run_id}", {}),
        ("/healthz", "GET"): lambda: ("/healthz", {}),
        ("/metrics", "GET"): lambda: ("/metrics", {}),
    }


def _expected(path: str, method: str, caller: str) -> int:
    scopes = required_scopes(path, method)
    if scopes is None:
        return 200
    if caller in ("none", "unknown token", "not bearer"):
        return 401
    granted = set(caller.split("+"))
    needs_ingest = any(s.startswith("ingest:") for alternative in scopes for s in alternative)
    if needs_ingest:
        if not any(g.startswith("ingest:") for g in granted):
            return 403
        return 201 if path == "/v1/event" else 200
    allowed = 202 if (path, method) == ("/internal/sync/{cloud}", "POST") else 200  # a sync is started, not run
    return allowed if any(set(alternative) <= granted for alternative in scopes) else 403


def test_every_route_answers_every_caller_as_its_scopes_say() -> None:
    with open_store("duckdb://:memory:") as store:
        api = build_api(store)
        store_seed = api.ctx.ingestor.ingest([volume_event(0, resource_id="vol-seed", event_id="seed")], origin="t")
        assert store_seed.stored == 1
        api.ctx.ingestor.dead_letter([RejectedRow("invalid_json", "invalid_json: seed", "t", "{")])  # row 1
        run_id = api.ctx.runtime.sync(SIM_CLOUD).run_id  # a finished run to read
        client = TestClient(api.app)
        operations = app_operations(api.app)
        assert set(_requests(0)) == operations, "a route without a request in this test"
        n = 100
        for (path, method) in sorted(operations):
            for caller, headers in CALLERS.items():
                n += 1
                url, kwargs = _requests(n, run_id)[(path, method)]()
                response = client.request(method, url, headers=headers, **kwargs)
                expected = _expected(path, method, caller)
                if caller == "ingest:other" and path == "/v1/event":
                    expected = 400  # the item is for c1: rejected as forbidden_cloud, in the event's own answer
                assert response.status_code == expected, f"{method} {url} as {caller}: {response.text[:200]}"
                check_answer(method, url, response)
                if path.startswith("/v1/event") and response.status_code in (200, 201, 400):
                    body = response.json()
                    outcome = body["results"][0] if "results" in body else body
                    writes_c1 = caller in ("ingest:*", "ingest:c1")
                    assert outcome["status"] == ("stored" if writes_c1 else "rejected"), (caller, outcome)
                    if not writes_c1:
                        assert outcome["reason"] == "forbidden_cloud"
        # Only the callers allowed to write c1 stored anything: two per ingest route (the seed is the 1).
        assert store.query("SELECT count(*) FROM events WHERE cloud = 'c1'")[0][0] == 1 + 2 * 2


def test_the_spec_names_a_scope_for_every_route_but_health_and_metrics() -> None:
    public = {(p, m.upper()) for p, item in spec()["paths"].items() for m, op in item.items()
              if required_scopes(p, m) is None}
    assert public == {("/healthz", "GET"), ("/metrics", "GET")}


# --- injection strings in every parameter, on both backends ---------------------------------------------------

INJECTIONS = [
    "'; DROP TABLE events; --",
    "' OR '1'='1",
    "\" OR 1=1 --",
    "%s",
    "%(x)s",
    "?",
    "$1",
    "\\",
    "\\'",
    "a\x00b",
    "'); DELETE FROM rejected_events; --",
    "1; TRUNCATE events",
    "*/ SELECT pg_sleep(5) /*",
]


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _tables(store: Store) -> list[str]:
    schema = "public" if store.dialect == "postgres" else "main"
    return [r[0] for r in store.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", [schema])]


def _parameters() -> list[tuple[str, str, str, str]]:
    """(path template, method, parameter name, location) for every parameter the spec declares."""
    found = []
    for path, item in spec()["paths"].items():
        for method, op in item.items():
            for param in op.get("parameters", []):
                if "$ref" in param:
                    param = spec()["components"]["parameters"][param["$ref"].rsplit("/", 1)[1]]
                found.append((path, method.upper(), param["name"], param["in"]))
    return found


def _url(path: str, name: str, where: str, value: str) -> str:
    benign = {"cloud": "c1", "resource_type": "volume", "resource_id": "vol-seed"}
    filled = path
    for key, default in benign.items():
        filled = filled.replace("{" + key + "}", quote(value if where == "path" and key == name else default, safe=""))
    if where == "query":
        filled += f"?{name}={quote(value, safe='')}"
    return filled


@pytest.mark.slow
def test_injection_strings_in_every_parameter_change_nothing(store: Store) -> None:
    api = build_api(store)
    api.ctx.ingestor.ingest([volume_event(0, resource_id="vol-seed", event_id="seed"),
                             volume_event(1, resource_id="vol-1", payload={"size": {"gb": "bad"}})], origin="t")
    client = TestClient(api.app)
    tables, events, rejected = _tables(store), store.event_count(), len(store.rejected(limit=1000))
    params = _parameters()
    assert {(p, m) for p, m, _, _ in params} >= {("/v1/rejected", "GET"), ("/v1/inventory", "GET")}
    values = [*INJECTIONS, _cursor({"before": INJECTIONS[0]}), _cursor({"after": INJECTIONS[:3]}),
              _cursor({"after": ["a\x00", "b", "c"]}), _cursor({"before": True})]
    for path, method, name, where in params:
        for value in values:
            url = _url(path, name, where, value)
            response = client.request(method, url, headers=bearer(ALL))
            assert response.status_code in (200, 400, 404), f"{method} {url}: {response.status_code} {response.text[:200]}"
            check_answer(method, url, response)
    assert _tables(store) == tables
    assert store.event_count() == events and len(store.rejected(limit=1000)) == rejected
    # Still there and still whole: the seeded history reads back.
    history = client.get("/v1/resources/c1/volume/vol-seed/events", headers=bearer(ALL))
    assert [e["event_id"] for e in history.json()["events"]] == ["seed"]


def test_injection_strings_in_event_fields_are_stored_as_plain_text(store: Store) -> None:
    client = TestClient(build_api(store).app)
    events = [volume_event(i, event_id=f"inj-{i}-{s}", resource_id=s, project_id=s)
              for i, s in enumerate(s for s in INJECTIONS if "\x00" not in s)]
    answer = client.post("/v1/events", json={"events": events}, headers=bearer(ALL)).json()
    assert answer["stored"] == len(events)
    for event in events:
        url = f"/v1/resources/c1/volume/{quote(event['resource_id'], safe='')}/events"
        (stored,) = client.get(url, headers=bearer(ALL)).json()["events"]
        assert (stored["event_id"], stored["resource_id"], stored["project_id"]) == (
            event["event_id"], event["resource_id"], event["project_id"])
    found = client.get("/v1/inventory", params={"project_id": INJECTIONS[0]}, headers=bearer(ALL)).json()
    assert [r["resource_id"] for r in found["resources"]] == [INJECTIONS[0]]
