"""Landing files are bounded (issue #26): a line or element over ``landing.max_item_bytes`` is refused alone
with a bounded excerpt in the dead letter, a gzip that decompresses past its ratio or size stops, documents
are read in linear time, symlinks are refused unless configured, and a file that stops fails its Dagster run."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

import pytest

from tally_pipeline.services import landing
from tally_pipeline.services.landing import LandingLimits, ingest_file, read_items
from tally_pipeline_tests.defs.test_dagster_assets import T0, setup, vol_event  # noqa: F401  (setup is a fixture)

SMALL = LandingLimits(max_item_bytes=64 * 1024, excerpt_bytes=1024)


def _lines(*items: object) -> bytes:
    return b"".join((item if isinstance(item, bytes) else json.dumps(item).encode()) + b"\n" for item in items)


def test_a_line_over_the_limit_is_refused_alone_with_an_excerpt(ingestor, store, tmp_path: Path) -> None:
    huge = b'{"event_id": "huge", "pad": "' + b"x" * (1024 * 1024) + b'"}'
    path = tmp_path / "day.jsonl"
    path.write_bytes(_lines(vol_event("a", "v1", "create", T0), huge, vol_event("b", "v2", "create", T0)))
    summary = ingest_file(ingestor, path, limits=SMALL)
    assert summary.error is None
    assert (summary.items, summary.stored, summary.rejected) == (3, 2, 1)
    (dead,) = store.rejected()
    assert dead.reason == "item_too_large" and "line 2" in dead.message and "max_item_bytes" in dead.message
    found, raw = store.rejected_raw(dead.id)
    assert found and raw is not None and len(raw) == SMALL.excerpt_bytes and raw.startswith('{"event_id": "huge"')


def test_an_element_over_the_limit_stops_the_document_with_an_excerpt(ingestor, store, tmp_path: Path) -> None:
    big = {"event_id": "huge", "pad": "x" * (1024 * 1024)}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"events": [vol_event("a", "v1", "create", T0), big, vol_event("b", "v2", "create", T0)]}))
    summary = ingest_file(ingestor, path, limits=SMALL)
    assert summary.error is not None and "max_item_bytes" in summary.error
    assert summary.stored == 1
    (dead,) = store.rejected()
    assert dead.reason == "item_too_large"
    assert len(store.rejected_raw(dead.id)[1] or "") <= SMALL.excerpt_bytes


@pytest.mark.parametrize("content", [b"\n" * (32 * 1024 * 1024), b"0" * (32 * 1024 * 1024)])
def test_a_gzip_bomb_stops_at_its_ratio(ingestor, store, tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(content, 9))
    assert len(content) > 100 * path.stat().st_size
    summary = ingest_file(ingestor, path)
    assert summary.error is not None and "max_ratio" in summary.error
    assert store.event_count() == 0


def _characters_parsed(document: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many characters the document reader hands to the JSON decoder in all (each call may scan from
    its start to the end of the buffer): the parsing work, counted instead of timed."""
    scanned = [0]

    def counted(text: str, pos: int):  # type: ignore[no-untyped-def]
        scanned[0] += len(text) - pos
        return real(text, pos)

    real = landing.decode_item
    with monkeypatch.context() as patch:
        patch.setattr(landing, "decode_item", counted)
        items = list(read_items(io.BytesIO(document), LandingLimits(max_item_bytes=64 * 1024 * 1024)))
    assert len(items) == 1
    return scanned[0]


def test_document_parsing_is_linear_in_an_element_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """An element longer than the read buffer is parsed again as the buffer grows; the buffer doubles, so
    the characters parsed over all attempts stay within a few times the element's size, whatever its size.
    Refilled a chunk at a time (the old way), a 4 MiB element is parsed from its start 64 times: about 32
    times its size, and 4 times the ratio of a 1 MiB element. Counted, so the machine's speed does not
    enter: the work parsed is the claim, no figure of seconds is needed."""
    def document(megabytes: int) -> bytes:
        numbers = ",".join(["12345"] * (megabytes * 1024 * 1024 // 6))
        return ('{"events": [{"payload": {"n": [' + numbers + "]}}]}").encode()

    ratios = {}
    for megabytes in (1, 4):
        text = document(megabytes)
        ratios[megabytes] = _characters_parsed(text, monkeypatch) / len(text)
    assert all(ratio < 4 for ratio in ratios.values()), ratios
    assert ratios[4] < 1.5 * ratios[1], ratios  # the same multiple of the size: linear


def test_a_symlink_is_refused_unless_configured(ingestor, store, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(_lines(vol_event("a", "v1", "create", T0)))
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    refused = ingest_file(ingestor, link)
    assert refused.error is not None and "symlink" in refused.error and store.event_count() == 0
    followed = ingest_file(ingestor, link, limits=LandingLimits(follow_symlinks=True))
    assert followed.error is None and followed.stored == 1


def test_a_truncated_gzip_fails_its_dagster_run_with_the_reason(setup) -> None:  # noqa: F811
    day = setup["landing"] / "2026-03-01"
    day.mkdir()
    whole = gzip.compress(_lines(*(vol_event(f"t{n}", f"v{n}", "create", T0) for n in range(200))))
    (day / "cut.jsonl.gz").write_bytes(whole[: len(whole) - 40])
    (day / "fine.jsonl").write_bytes(_lines(vol_event("f1", "w1", "create", T0)))
    result = setup["defs"].resolve_job_def("landing_files").execute_in_process(
        partition_key="2026-03-01", instance=setup["instance"], raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "cut.jsonl.gz" in str(failure.event_specific_data.error)
    assert setup["rt"].store.event_count() >= 1  # the other file, and whatever was read before the cut


def test_a_file_of_refused_items_keeps_its_first_rows_and_counts_the_rest_in_one(ingestor, store, tmp_path: Path) -> None:
    path = tmp_path / "junk.jsonl.gz"
    lines = [{"a": 1}] * 300 + [vol_event("a", "v1", "create", T0)] + [b"not json {"] * 100 + \
        [vol_event("b", "v2", "create", T0)]
    path.write_bytes(gzip.compress(_lines(*lines)))
    limits = LandingLimits(max_rejected_rows=50)
    summary = ingest_file(ingestor, path, limits=limits, batch_size=64)
    assert (summary.items, summary.stored, summary.rejected, summary.not_kept) == (402, 2, 400, 350)
    assert summary.reasons == {"unknown_field": 300, "invalid_json": 100}
    rows = store.rejected(limit=1000)
    (counted,) = [r for r in rows if r.reason == "too_many_rejections"]
    assert len(rows) == 51
    kept = [r for r in rows if r.reason != "too_many_rejections"]
    for reason in ("unknown_field", "invalid_json"):  # each refused item: a row of its own, or counted in the one
        assert sum(r.reason == reason for r in kept) + _count(counted.message, reason) == summary.reasons[reason]
    assert "junk.jsonl.gz" in counted.message and "landing.max_rejected_rows 50" in counted.message


def _count(message: str, reason: str) -> int:
    found = re.search(rf"\b{reason} (\d+)", message.split("one by one:")[1])
    return int(found.group(1)) if found else 0


def test_a_file_of_refused_items_keeps_at_most_its_bytes(ingestor, store, tmp_path: Path) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_bytes(_lines(*({"a": "x" * 1000, "n": n} for n in range(40))))
    summary = ingest_file(ingestor, path, limits=LandingLimits(max_rejected_bytes=10_000))
    rows = store.rejected(limit=1000)
    kept = [r for r in rows if r.reason != "too_many_rejections"]
    assert 0 < len(kept) < 10 and summary.not_kept == 40 - len(kept)
    assert sum(len(r.message) + len(store.rejected_raw(r.id)[1] or "") for r in kept) <= 10_000
    assert [r.reason for r in rows].count("too_many_rejections") == 1


def test_a_file_within_its_bounds_writes_no_summary_row(ingestor, store, tmp_path: Path) -> None:
    path = tmp_path / "few.jsonl"
    path.write_bytes(_lines({"a": 1}, {"b": 2}))
    summary = ingest_file(ingestor, path)
    assert (summary.rejected, summary.not_kept) == (2, 0)
    assert sorted(r.reason for r in store.rejected(limit=10)) == ["unknown_field", "unknown_field"]
