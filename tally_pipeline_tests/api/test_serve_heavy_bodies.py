"""One client's heavy bodies never stall the others, and its refusals are readable (issue #26): a real
``tally serve`` parses bodies off its event loop, answers an oversized body's 413 and an over-quota 429
after reading the body (so the client sees them, not a reset), and charges oversized bodies to the quota."""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _spaced_batch() -> bytes:
    """1,000 valid events written with spacing, so the fast reader cannot take the body as is: it is read
    the exact, slower way (about 4 MiB, a second of CPU here). Sent again, every event is a duplicate."""
    events = []
    for i in range(1000):
        item = volume_event(i)
        item["payload"]["x"] = [1.5] * 400
        events.append(item)
    return json.dumps({"events": events}, indent=1).encode()


def _health_seconds(http: httpx.Client, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        assert http.get(f"{url}/healthz").status_code == 200
        out.append(time.perf_counter() - start)
    return out


@pytest.mark.slow
def test_heavy_bodies_do_not_stall_health_checks(pg_url: str, tmp_path: Path) -> None:
    body = _spaced_batch()
    with ServeProcess(migrate(pg_url), tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server:
        server.start()
        with httpx.Client(timeout=120) as http:
            assert http.post(f"{server.url}/v1/events", content=body, headers=AUTH).json()["stored"] == 1000
            start = time.perf_counter()
            assert http.post(f"{server.url}/v1/events", content=body, headers=AUTH).json()["duplicates"] == 1000
            one_post = time.perf_counter() - start  # the baseline: what one heavy body costs the server
            done = threading.Event()
            posted = [0, 0]

            def flood(n: int) -> None:
                with httpx.Client(timeout=120) as own:
                    while not done.is_set():
                        own.post(f"{server.url}/v1/events", content=body, headers=AUTH)
                        posted[n] += 1

            flooders = [threading.Thread(target=flood, args=(n,)) for n in range(2)]
            for thread in flooders:
                thread.start()
            health: list[float] = []
            try:  # probe until each flooder has had three bodies answered: the probes span the flood
                while min(posted) < 3:
                    health += _health_seconds(http, server.url, 1)
            finally:
                done.set()
                for thread in flooders:
                    thread.join()
    # Parsed on the event loop, a health check waits for the bodies being parsed, one after the other:
    # measured here, up to twice as long as a whole post (3.75 s against 1.75 s). Off the loop it waits
    # for a share of the GIL only (at most 0.4 s against 1.9 s).
    assert max(health) < one_post, (statistics.mean(health), max(health), one_post)


def _readable_answers(url: str, body: bytes, n: int) -> list[int]:
    """Post ``body`` ``n`` times, each on a new connection; the status of each answer (0: none readable)."""
    statuses = []
    for _ in range(n):
        try:
            with httpx.Client(timeout=60) as http:
                statuses.append(http.post(f"{url}/v1/events", content=body, headers=AUTH).status_code)
        except httpx.TransportError:
            statuses.append(0)
    return statuses


def test_oversized_bodies_get_a_readable_413_then_a_charged_429(pg_url: str, tmp_path: Path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text("api: {max_body_bytes: 262144}\ndead_letter: {max_bytes_per_minute: 1048576}\n")
    over = b'{"events": [' + b" " * 400_000 + b"]}"  # over the limit, under twice it: read and dropped
    with ServeProcess(migrate(pg_url), tokens_file=tokens_file(tmp_path), config=config,
                      log_path=tmp_path / "serve.log") as server:
        server.start()
        statuses = _readable_answers(server.url, over, 8)
    # 256 KiB charged per refused body against 1 MiB a minute: 413s until the quota is spent (the
    # last one takes it over), then 429s; every answer readable, none a reset.
    refused = statuses.count(413)
    assert 4 <= refused <= 5 and statuses == [413] * refused + [429] * (8 - refused), statuses
