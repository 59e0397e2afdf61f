"""Nothing proportional to a body's size runs on the event loop (issue #36): a 5 MiB body of random bytes
is refused ``400 invalid_json`` and kept in the dead letter, and the text the dead letter keeps (decoded,
escaped, masked: 0.7 s of CPU per 5 MiB) is built in the thread pool.

Synchronised on events, never on time: the masking step is held until ``/healthz`` has answered, so the
refused body is being processed, provably, while ``/healthz`` is served. Were the work on the loop, the
loop would be held with it and ``/healthz`` could not answer at all (the bound on that wait is a failure
detector, not a measurement). Where the work ran is asserted directly: in a thread with no running loop.
Bytes that are not UTF-8 are decoded a chunk at a time (one decode of 5 MiB of them kept the GIL, and
so the loop, for seconds); the chunks give the same text as one decode.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable

import httpx
import pytest

from tally_pipeline.api import app as api_app
from tally_pipeline.api.bodies import DECODE_CHUNK, raw_text
from tally_pipeline.store import open_store
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.holds import NEVER, Held

BODY_BYTES = 5 * 1024 * 1024


def test_a_5_mib_random_body_is_dead_lettered_off_the_loop_while_healthz_answers(
        monkeypatch: pytest.MonkeyPatch, serve_app: Callable[[object], str]) -> None:
    decode = Held(api_app.raw_text, hold=False)
    mask = Held(api_app.mask_credentials, hold=True)
    monkeypatch.setattr(api_app, "raw_text", decode)
    monkeypatch.setattr(api_app, "mask_credentials", mask)
    with open_store("duckdb://:memory:", migrate=True) as store:
        url = serve_app(build_api(store, max_body_bytes=BODY_BYTES + 1024).app)
        headers = {**bearer(token_for("ingest:*")), "Content-Type": "application/json"}
        body = os.urandom(BODY_BYTES)
        answers: list[httpx.Response] = []
        posting = threading.Thread(
            target=lambda: answers.append(httpx.post(f"{url}/v1/events", content=body, headers=headers,
                                                     timeout=NEVER)), daemon=True)
        posting.start()
        try:
            assert mask.entered.wait(NEVER), "the refused body never reached the dead-letter step"
            assert decode.on_loop == mask.on_loop == [False], "the dead-letter text was built on the event loop"
            # The refused body is held mid-processing: the loop must still answer.
            health = httpx.get(f"{url}/healthz", timeout=NEVER / 4)
            assert health.status_code == 200
        finally:
            mask.release.set()
        posting.join(NEVER)
        assert not posting.is_alive()
        (answer,) = answers
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_json"
        assert threading.main_thread().name not in decode.threads + mask.threads
        (row,) = store.rejected(reason="invalid_json")
        assert row.raw_bytes is not None and row.raw_bytes >= BODY_BYTES


# Named, and the random body seeded: xdist's workers must collect the same ids.
@pytest.mark.parametrize("body", [
    random.Random(93).randbytes(3 * DECODE_CHUNK + 17),
    b"a" * (DECODE_CHUNK - 1) + "€".encode() + b"\xff\x00",  # a character split between two chunks
    "é€😀".encode() * 5000 + b"\x00",
    b"",
], ids=["random", "split-character", "multibyte-and-nul", "empty"])
def test_the_dead_letter_text_decoded_by_chunks_is_the_whole_bodys(body: bytes) -> None:
    assert raw_text(body) == body.decode("utf-8", errors="backslashreplace").replace("\x00", "\\u0000")
