"""Hostile requests the app itself answers: numeric query parameters written in anything but ASCII digits,
paths one slash off a route, and a forged ``Host`` header that no answer may echo."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tally_pipeline.store import Store
from tally_pipeline_tests.api_setup import ALL, SIM_CLOUD, bearer, build_api, token_for
from tally_pipeline_tests.collector_api import volume_event


@pytest.fixture(name="store", scope="module")
def module_wide_store(module_store: Store) -> Store:
    """This module's tests share one store per backend (``module_store``, api/conftest.py)."""
    return module_store


EVIL_HOST = "evil.example.invalid"


@pytest.fixture
def client(store: Store) -> TestClient:
    return TestClient(build_api(store).app, raise_server_exceptions=False)


@pytest.mark.parametrize("path", ["/v1/inventory", "/v1/rejected", "/v1/usage"])
@pytest.mark.parametrize("limit", [
    "²",  # a superscript: str.isdigit() holds, int() fails
    "٥",  # an Arabic-Indic five: int() reads it as 5
    "５",  # a fullwidth five
    "1" * 4301,  # past Python's int() digit limit
    "0" * 4300 + "5",  # small in value, long in digits
    " 5", "5 ", "+5", "-5", "0x10", "5.0", "1_0", "",
])
def test_a_limit_that_is_not_plain_ascii_digits_is_a_400_naming_it(client: TestClient, path: str, limit: str) -> None:
    response = client.get(path, params={"limit": limit}, headers=bearer(ALL))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_parameter"
    assert "limit" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/inventory", "/v1/rejected", "/v1/usage"])
def test_a_plain_limit_still_works(client: TestClient, path: str) -> None:
    for limit in ("1", "1000", "0005"):
        assert client.get(path, params={"limit": limit}, headers=bearer(ALL)).status_code == 200, limit


ONE_SLASH_OFF = [
    ("GET", "/v1/inventory/"),
    ("GET", "/v1/rejected/"),
    ("GET", "/healthz/"),
    ("GET", "/metrics/"),
    ("POST", "/v1/events/"),
    ("POST", "/v1/event/"),
    ("POST", "/internal/sync/sim/"),
    ("GET", "/v1/resources/c1/volume/vol-1/events/"),
    ("GET", "/v1/resources/c1/volume/vol-1/lifecycle/"),
    ("GET", "//v1/inventory"),
]


@pytest.mark.parametrize("method,path", ONE_SLASH_OFF)
@pytest.mark.parametrize("who", ["anonymous", "token"])
def test_no_route_redirects_and_no_answer_echoes_the_host(client: TestClient, method: str, path: str, who: str) -> None:
    headers = {"host": EVIL_HOST, **(bearer(ALL) if who == "token" else {})}
    response = client.request(method, path, headers=headers, follow_redirects=False)
    assert response.status_code == 404, (response.status_code, response.headers)
    assert response.json()["error"] == "not_found"
    assert "location" not in response.headers
    assert EVIL_HOST not in response.text
    assert all(EVIL_HOST not in value for value in response.headers.values())


def test_no_answer_of_any_route_echoes_the_host(client: TestClient) -> None:
    for method, path in [("GET", "/v1/inventory"), ("GET", "/v1/rejected"), ("GET", "/healthz"), ("GET", "/metrics"),
                         ("POST", "/v1/events"), ("PUT", "/v1/events"), ("GET", "/nowhere"),
                         ("GET", "/v1/resources/c1/volume/vol-1/events")]:
        for headers in ({"host": EVIL_HOST}, {"host": EVIL_HOST, **bearer(ALL)}):
            response = client.request(method, path, headers=headers, follow_redirects=False)
            assert not 300 <= response.status_code < 400, (method, path, response.status_code)
            assert EVIL_HOST not in response.text and all(EVIL_HOST not in v for v in response.headers.values())


def _label_sets(page: str) -> set[str]:
    """Every distinct label set on the page's samples (``name{...}``)."""
    return {line.split(" ")[0] for line in page.splitlines() if line and not line.startswith("#")}


def test_a_thousand_junk_clouds_add_one_metrics_label(client: TestClient) -> None:
    before = _label_sets(client.get("/metrics").text)
    junk = [volume_event(i, cloud=f"junk-{i}", event_type="Not A Type") for i in range(500)]
    junk += [volume_event(i, cloud=f"bad cloud\n{i}" + "x" * 80) for i in range(500, 1000)]
    for start in range(0, len(junk), 100):  # the test API takes bodies up to 64 KiB
        answer = client.post("/v1/events", json={"events": junk[start:start + 100]}, headers=bearer(token_for("ingest:*")))
        assert answer.status_code == 200 and answer.json()["rejected"] == 100
    page = client.get("/metrics").text
    added = _label_sets(page) - before
    assert added == {'tally_events_total{cloud="other",outcome="rejected"}'}
    assert "junk-" not in page and "bad cloud" not in page
    assert 'tally_events_total{cloud="other",outcome="rejected"} 1000.0' in page


def test_configured_clouds_and_the_clouds_a_token_names_keep_their_labels(client: TestClient) -> None:
    c1 = bearer(token_for("ingest:c1"))
    assert client.post("/v1/events", json={"events": [volume_event(1, cloud="c1", event_id="lbl-c1"),
                                                      volume_event(2, cloud="zz", event_id="lbl-zz")]},
                       headers=c1).json()["rejected"] == 1  # zz: forbidden_cloud for this token
    assert client.post("/v1/events", json={"events": [volume_event(3, cloud=SIM_CLOUD, event_id="lbl-sim"),
                                                      volume_event(4, cloud="never-configured", event_id="lbl-nc")]},
                       headers=bearer(token_for("ingest:*"))).json()["stored"] == 2
    page = client.get("/metrics").text
    assert 'tally_events_total{cloud="c1",outcome="stored"}' in page
    assert f'tally_events_total{{cloud="{SIM_CLOUD}",outcome="stored"}}' in page
    assert 'cloud="zz"' not in page
    assert 'tally_events_total{cloud="never-configured"' not in page
