"""Input handled exactly: numbers as written, duplicate keys refused, items dead-lettered as received,
timestamps always RFC 3339 with four-digit years."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import JSON
from tally_pipeline.core.jsontext import DuplicateKeys, InexactNumber, array_item_texts, loads_exact
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.landing import ingest_file
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.events import event

WRITER = bearer(token_for("ingest:*"))


def _text(item: dict, **raw_fields: str) -> str:
    """An item's JSON text with some fields' values written verbatim (numbers as the test spells them)."""
    marked = dict(item, **{k: f"@{k}@" for k in raw_fields})
    text = json.dumps(marked)
    for k, v in raw_fields.items():
        text = text.replace(f'"@{k}@"', v)
    return text


def _post(client: TestClient, *items: str) -> dict:
    answer = client.post("/v1/events", content='{"events": [' + ", ".join(items) + "]}", headers=WRITER)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("number,reason", [
    ("1e-400", "number_out_of_range"), ("1e400", "number_out_of_range"), ("-1e400", "number_out_of_range"),
    ("123456789012345678901234567890", "number_out_of_range"),
    ("999999999.99999999999", "invalid_payload"), ("0.30000000000000001", "invalid_payload"),
])
def test_a_payload_number_that_cannot_be_stored_exactly_is_refused(store, number: str, reason: str) -> None:
    client = TestClient(build_api(store).app)
    item = _text(event(), payload='{"size": {"flavor_name": "m", "vcpus": 1, "ram_mb": 1, "disk_gb": 1}, "x": ' + number + "}")
    result = _post(client, item)["results"][0]
    assert (result["status"], result["reason"]) == ("rejected", reason)
    assert "payload.x" in result["message"] and number in result["message"]
    assert store.event_count() == 0


def test_an_integer_field_takes_only_a_number_written_as_an_integer(store) -> None:
    client = TestClient(build_api(store).app)

    def size(vcpus: str) -> str:
        return _text(event(), payload='{"size": {"flavor_name": "m", "vcpus": ' + vcpus + ', "ram_mb": 1, "disk_gb": 1}}')

    results = _post(client, size("999999999.99999999999"), size("2.5"), size("2.0"), size("20e-1"), size("2"))["results"]
    assert [(r["status"], r.get("reason")) for r in results] == [
        ("rejected", "invalid_payload"), ("rejected", "size_schema"), ("stored", None), ("stored", None), ("stored", None)]
    sizes = [json.loads(p) if isinstance(p, str) else p for (p,) in store.query("SELECT payload FROM events")]
    assert sorted(type(s["size"]["vcpus"]).__name__ + str(s["size"]["vcpus"]) for s in sizes) == ["int2"] * 3


def test_exact_numbers_written_any_way_are_kept(store) -> None:
    client = TestClient(build_api(store).app)
    e = event()
    item = _text(e, payload='{"size": {"flavor_name": "m", "vcpus": 1, "ram_mb": 1, "disk_gb": 1}, '
                            '"util": 0.1, "big": 1e300, "tiny": 5e-324, "n": 12345678901234567}')
    assert _post(client, item)["stored"] == 1
    payload = store.query("SELECT payload FROM events")[0][0]
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert (float(payload["util"]), float(payload["big"]), float(payload["tiny"]), payload["n"]) == (
        0.1, 1e300, 5e-324, 12345678901234567)


def test_a_duplicate_key_in_the_body_is_invalid_body_and_kept_as_sent(store) -> None:
    client = TestClient(build_api(store).app)
    body = '{"events": [' + json.dumps(event()) + '], "events": []}'
    answer = client.post("/v1/events", content=body, headers=WRITER)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_body"
    assert "events" in answer.json()["detail"]
    assert store.event_count() == 0
    (row,) = store.rejected(reason="invalid_body")
    assert row.raw == body


def test_a_duplicate_key_in_an_envelope_is_invalid_item_and_kept_as_sent(store) -> None:
    client = TestClient(build_api(store).app)
    good = json.dumps(event())
    twice = '{"event_id": "k1", "event_id": "k2"}'
    deep = _text(event(), payload='{"size": {"flavor_name": "m", "vcpus": 1, "vcpus": 9, "ram_mb": 1, "disk_gb": 1}}')
    results = _post(client, good, twice, deep)["results"]
    assert [(r["status"], r.get("reason")) for r in results] == [
        ("stored", None), ("rejected", "invalid_item"), ("rejected", "invalid_item")]
    assert "'event_id'" in results[1]["message"] and "'vcpus'" in results[2]["message"]
    raws = sorted(r.raw for r in store.rejected(reason="invalid_item"))
    assert raws == sorted([twice, deep])
    single = client.post("/v1/event", content=twice, headers=WRITER)
    assert single.status_code == 400 and single.json()["reason"] == "invalid_item"


def test_the_dead_letter_keeps_each_item_exactly_as_received(store) -> None:
    client = TestClient(build_api(store).app)
    odd = '{ "colour" :\t"r\\u00e9d",  "n": 1.50 }'
    conflict_first = event(event_id="c-1")
    _post(client, json.dumps(conflict_first))
    changed = '{"event_id": "c-1", ' + json.dumps(dict(conflict_first, resource_id="zz"))[1:].replace(
        '"event_id": "c-1", ', "")
    _post(client, json.dumps(event()), odd, changed)
    assert [r.raw for r in store.rejected(reason="unknown_field")] == [odd]
    assert [r.raw for r in store.rejected(reason="duplicate_conflict")] == [changed]


def test_a_landing_file_reads_exactly_and_keeps_each_line(store, registry, tmp_path: Path) -> None:
    twice = '{"event_id": "k1", "event_id": "k2"}'
    inexact = _text(event(), payload='{"size": {"flavor_name": "m", "vcpus": 1, "ram_mb": 1, "disk_gb": 1}, "x": 1e-400}')
    lines = tmp_path / "in.jsonl.gz"
    lines.write_bytes(gzip.compress("\n".join([twice, inexact, json.dumps(event())]).encode()))
    summary = ingest_file(Ingestor(store, registry), lines)
    assert (summary.stored, summary.reasons) == (1, {"invalid_item": 1, "number_out_of_range": 1})
    document = tmp_path / "doc.json"
    document.write_text('{"events": [' + twice.replace("k", "d") + ", " + json.dumps(event()) + "]}")
    assert ingest_file(Ingestor(store, registry), document).stored == 1
    assert sorted(r.raw for r in store.rejected()) == sorted([twice, inexact, twice.replace("k", "d")])


def test_the_reader_takes_the_fast_path_only_when_it_is_exact() -> None:
    canonical = orjson.dumps({"events": [event(payload={"x": 0.1, "size": {}})]})
    assert loads_exact(canonical) == orjson.loads(canonical)
    assert isinstance(loads_exact(b'{"a": 1e-400}')["a"], InexactNumber)
    top = loads_exact(b'{"events": [], "events": [1]}')
    assert isinstance(top, DuplicateKeys) and top.duplicate == "events"
    inner = loads_exact(b'{"events": [{"a": {"b": 1, "b": 2}}, {"c": 1}]}')
    assert not isinstance(inner, DuplicateKeys)
    assert [type(i) for i in inner["events"]] == [DuplicateKeys, dict]
    assert array_item_texts('{"events" : [ {"a": [1, 2]} ,"x", 3.0 ]}') == ['{"a": [1, 2]}', '"x"', "3.0"]


def test_timestamps_always_have_four_digit_years() -> None:
    year_one = datetime(1, 1, 1, tzinfo=UTC)
    assert format_rfc3339(year_one) == "0001-01-01T00:00:00Z"
    assert format_rfc3339(datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC)) == "0999-12-31T23:59:59.000005Z"
    # Another offset, a zero offset that is not the UTC object, and a naive instant (taken as UTC) read alike.
    assert format_rfc3339(datetime(2026, 1, 1, 2, 30, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-01T00:30:00Z"
    assert format_rfc3339(datetime(2026, 1, 1, 0, 30, 0, 120, tzinfo=timezone(timedelta(0), "GMT"))) \
        == "2026-01-01T00:30:00.000120Z"
    assert format_rfc3339(datetime(999, 12, 31, 23, 59, 59)) == "0999-12-31T23:59:59Z"
    # The fallback a response takes when orjson cannot write it (Postgres hands 1e300 back as a 301-digit integer).
    rendered = JSON({"n": 10**300, "at": year_one}).body
    assert b'"at":"0001-01-01T00:00:00Z"' in rendered


@pytest.mark.parametrize("field,value", [("payload", '{"size": {"flavor_name": "m", "vcpus": 1, "ram_mb": 1, '
                                                     '"disk_gb": 1}, "note": "a\\ud800b"}'),
                                         ("resource_id", '"r-\\udfff"')])
def test_a_lone_surrogate_is_refused_as_invalid_text(store, field: str, value: str) -> None:
    client = TestClient(build_api(store).app)
    result = _post(client, _text(event(), **{field: value}))["results"][0]
    assert (result["status"], result["reason"]) == ("rejected", "invalid_text")
    assert field in result["message"] and store.event_count() == 0
    (row,) = store.rejected(reason="invalid_text")
    assert "\\ud800" in row.raw or "\\udfff" in row.raw  # the dead letter keeps the item as sent
