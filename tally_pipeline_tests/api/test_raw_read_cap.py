"""``GET /v1/rejected/{id}/raw`` is capped at the API's body limit and streamed (issue #26): readers of a
dead-letter row larger than the cap get its first ``max_body_bytes`` bytes and headers saying the
whole size, and a real ``tally serve`` answering several of them at once grows by less than the row."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.store import open_store
from tally_pipeline.store.base import RejectedRow
from tally_pipeline.store.duckdb.store import SharedFile
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file

CAP = 1024 * 1024  # the server's body limit in this test, and so the raw read's cap
ROW = 24 * CAP  # a row far larger than the cap (a landing line kept whole by an older release)
READERS = 4


def _peak_kib(server: ServeProcess) -> int:
    for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_raw_reads_are_capped_and_streamed(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"duckdb://{tmp_path / 'tally.duckdb'}" if backend == "duckdb" else request.getfixturevalue("pg_url")
    migrate(url)
    big = "".join(f"{n:09d}é" for n in range(ROW // 11))  # not compressible to nothing, with 2-byte characters
    with open_store(url) as store:
        store.run(lambda uow: uow.insert_rejections(
            [RejectedRow("invalid_json", "invalid_json: seed", "file:big", "small"),
             RejectedRow("invalid_json", "invalid_json: seed", "file:big", big)], store_now()))
        seeded = {row.raw_bytes: row.id for row in store.rejected()}
        small_id, big_id = seeded[5], seeded[len(big.encode())]  # by size, not by the order ids were given
    if backend == "duckdb":  # the file is this process's no more: the server opens what was written
        assert SharedFile.of(url.removeprefix("duckdb://"))._con is None
    config = tmp_path / "tally.yaml"
    config.write_text(f"api: {{max_body_bytes: {CAP}}}\n")
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), config=config, log_path=tmp_path / "serve.log") as server:
        server.start()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, timeout=120, headers=headers) as http:
            # What the server sees first, so that a failure says whether it sees the rows at all.
            listed = http.get("/v1/rejected", params={"limit": 10})
            assert sorted(r["id"] for r in listed.json()["rejected"]) == sorted([small_id, big_id]), \
                (listed.status_code, listed.text[:2000], server.log_tail(5000))
            small = http.get(f"/v1/rejected/{small_id}/raw")
            assert small.text == "small" and small.headers["x-raw-truncated"] == "false"
            assert small.headers["x-raw-bytes"] == "5"
            baseline = _peak_kib(server)
            answers: list[httpx.Response] = []

            def read() -> None:
                with httpx.Client(base_url=server.url, timeout=120, headers=headers) as own:
                    answers.append(own.get(f"/v1/rejected/{big_id}/raw"))

            readers = [threading.Thread(target=read) for _ in range(READERS)]
            for thread in readers:
                thread.start()
            for thread in readers:
                thread.join()
            grown_kib = _peak_kib(server) - baseline
    size = len(big.encode())
    for answer in answers:
        assert answer.status_code == 200
        assert answer.headers["x-raw-bytes"] == str(size) and answer.headers["x-raw-truncated"] == "true"
        assert len(answer.content) <= CAP and len(answer.content) > CAP - 4
        assert big.encode().startswith(answer.content)
    assert len(answers) == READERS
    # Held whole, each reader would cost at least the row (its text, then its bytes): four readers,
    # several times the row. Streamed, the server's peak grows by less than one row. (On Postgres: the
    # server slices the value; an embedded DuckDB reads the row into its own buffers whatever is asked.)
    if backend == "postgres":
        assert grown_kib * 1024 < size, (grown_kib, size)


def store_now():
    from datetime import UTC, datetime

    return datetime.now(UTC)
