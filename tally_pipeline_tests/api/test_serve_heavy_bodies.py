"""One client's heavy bodies never stall the others, and its refusals are readable (issue #26): bodies are
parsed off the event loop (a ``/healthz`` answers while every parse slot holds a heavy body, proven by
holding the parse, not by timing it), and a real ``tally serve`` answers an oversized body's 413 and an
over-quota 429 after reading the body (so the client sees them, not a reset), charging oversized bodies
to the quota."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tally_pipeline.api import app as api_app
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.store import open_store
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file, wait_until
from tally_pipeline_tests.holds import NEVER, Held

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _spaced_batch() -> bytes:
    """1,000 valid events written with spacing, so the fast reader cannot take the body as is: it is read
    the exact, slower way (about 4 MiB, a second of CPU here)."""
    events = []
    for i in range(1000):
        item = volume_event(i)
        item["payload"]["x"] = [1.5] * 400
        events.append(item)
    return json.dumps({"events": events}, indent=1).encode()


def test_heavy_bodies_being_parsed_do_not_hold_health_checks(
        monkeypatch: pytest.MonkeyPatch, serve_app: Callable[[object], str]) -> None:
    """Every parse slot is taken by a heavy body whose parse is held mid-way; ``/healthz`` must answer
    meanwhile, and each parse must have run in a worker thread. Parsed on the event loop (as before
    issue #26), the first held parse holds the loop: the assertion on where it ran fails, and
    ``/healthz`` gets no answer at all (its bound only detects that failure). Nothing here is timed."""
    parse = Held(api_app.parse_json, hold=True)
    monkeypatch.setattr(api_app, "parse_json", parse)
    body = _spaced_batch()
    with open_store("duckdb://:memory:", migrate=True) as store:
        api = build_api(store, max_body_bytes=2 * len(body))
        url = serve_app(api.app)
        headers = {**bearer(token_for("ingest:*")), "Content-Type": "application/json"}
        answers: list[httpx.Response] = []
        posters = [threading.Thread(target=lambda: answers.append(
            httpx.post(f"{url}/v1/events", content=body, headers=headers, timeout=NEVER)), daemon=True)
            for _ in range(api.ctx.parse_workers)]
        for thread in posters:
            thread.start()
        try:
            assert parse.entered.wait(NEVER), "no body reached its parse"
            assert parse.on_loop[0] is False, "a body was parsed on the event loop"
            wait_until(lambda: parse.calls == api.ctx.parse_workers, "every parse slot to hold a body", timeout=NEVER)
            assert parse.on_loop == [False] * api.ctx.parse_workers, "a body was parsed on the event loop"
            with httpx.Client(timeout=NEVER / 4) as http:  # both bodies held mid-parse: the loop still answers
                assert [http.get(f"{url}/healthz").status_code for _ in range(3)] == [200] * 3
            assert parse.calls == api.ctx.parse_workers  # still held: the answers came while they were
        finally:
            parse.release.set()
        for thread in posters:
            thread.join(NEVER)
            assert not thread.is_alive()
    assert sorted(a.json()["stored"] + a.json()["duplicates"] for a in answers) == [1000, 1000]
    assert threading.main_thread().name not in parse.threads


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
