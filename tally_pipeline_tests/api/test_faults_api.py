"""Faults of the API process, with ``tally serve`` as a real process on a real socket over real Postgres:
the API down for a while, and the API killed with SIGKILL in the middle of a stream of batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.collector import Collector, buffer_status
from tally_pipeline.collector.backoff import Backoff
from tally_pipeline_tests.collector_api import wait_for_outcome
from tally_pipeline_tests.faults import (
    TOKEN,
    BatchLog,
    dead_letter,
    events,
    holds_lock_on,
    ids_of,
    in_thread,
    invalid,
    migrate,
    post_batches,
    session,
    stored_ids,
    tokens_file,
    wait_connections_gone,
    wait_for_blocked,
    wait_until,
)

QUICK_RETRY = Backoff(base=0.05, max_delay=0.3)


@pytest.mark.slow
def test_through_api_outages_every_submitted_event_is_stored_exactly_once(pg_url: str, tmp_path: Path) -> None:
    url = migrate(pg_url)
    first, second, third = events("a", 1200), events("b", 700), events("c", 300)
    bad = invalid("a", 20)
    server = ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log")
    try:
        with Collector(server.url, TOKEN, tmp_path / "buffer", batch_size=250, backoff=QUICK_RETRY,
                       idle_interval=0.05) as collector:
            collector.submit_many(first + bad)
            collector.start()
            assert wait_for_outcome(collector, "unavailable"), "the sender should find nothing listening"
            collector.submit_many(second)
            server.start()  # the API comes up, late
            assert collector.wait_until_empty(timeout=90), collector.status().sender

            server.kill()  # down again, abruptly, while the collector keeps taking events
            collector.submit_many(third + first[:100])  # a hundred resubmitted: the API must absorb them
            assert wait_for_outcome(collector, "unavailable")
            assert collector.buffered() == len(third) + 100
            server.start()
            assert collector.wait_until_empty(timeout=90), collector.status().sender
            local_rejects = collector.rejected()
    finally:
        server.stop()
    stored = Counter(stored_ids(url))
    assert set(stored) == ids_of([first, second, third])
    assert set(stored.values()) == {1}
    assert sorted(r.event_id for r in local_rejects) == sorted(e["event_id"] for e in bad)
    assert Counter(reason for reason, _ in dead_letter(url)) == Counter({"size_schema": len(bad)})


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_stream_loses_no_answered_batch_and_replay_stores_each_once(
    pg_url: str, tmp_path: Path
) -> None:
    url = migrate(pg_url)
    batches = [events(f"k{n}", 500) for n in range(20)]
    log = BatchLog()
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server:
        server.start()
        with in_thread(post_batches, server.url, batches, log):
            assert log.wait_answered(4, timeout=120), log.error
            status = server.kill()  # mid-stream: the client posts back to back, so a batch is in flight
        assert status == -signal.SIGKILL
        assert log.failed is not None and log.failed < len(batches), "the stream should have been cut"
        wait_connections_gone(url)  # the killed API's sessions have ended: what they committed is all there is

        stored = set(stored_ids(url))
        answered = ids_of(batches[n] for n in log.answered)
        assert answered <= stored, "an event of a batch answered 200 was lost"
        in_flight = ids_of([batches[log.failed]])
        assert stored - answered in (set(), in_flight), "only the batch in flight may be stored unanswered, and whole"

        server.start()  # same port, same database
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            outcomes: Counter[str] = Counter()
            for n in range(len(batches)):  # replay everything not answered, then everything once more
                if n in log.answered:
                    continue
                answer = http.post(f"{server.url}/v1/events", json={"events": batches[n]}).json()
                outcomes.update(r["status"] for r in answer["results"])
            again = Counter()
            for batch in batches:
                again.update(r["status"] for r in http.post(f"{server.url}/v1/events", json={"events": batch}).json()["results"])
    unanswered = (len(batches) - len(log.answered)) * 500
    assert outcomes == Counter({"stored": unanswered - len(stored - answered), "duplicate": len(stored - answered)}) - Counter()
    assert again == Counter({"duplicate": len(batches) * 500})
    final = Counter(stored_ids(url))
    assert set(final) == ids_of(batches) and set(final.values()) == {1}


SEND = """
import sys
from tally_pipeline.collector import Collector, buffer_status
with Collector(sys.argv[1], sys.argv[2], sys.argv[3], batch_size=200) as collector:
    collector.drain()
"""


@pytest.mark.slow
def test_collector_killed_while_the_api_stores_its_batch_then_restarted_loses_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    """The real-API counterpart of test_collector_processes: the batch is committed after its sender died."""
    url = migrate(pg_url)
    valid, bad = events("ck", 1000), invalid("ck", 5)
    items = valid[:450] + bad[:1] + valid[450:] + bad[1:]  # the third batch of 200 holds one invalid item
    buffer = tmp_path / "buffer"
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server:
        server.start()
        with Collector(server.url, TOKEN, buffer) as collector:
            collector.submit_many(items)
        with session(url) as watcher, session(url) as locker:
            # Hold the dead letter: the third batch stops inside its transaction, events written, uncommitted.
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE rejected_events IN EXCLUSIVE MODE")
            child = subprocess.Popen([sys.executable, "-c", SEND, server.url, TOKEN, str(buffer)],
                                     start_new_session=True)
            try:
                backend = wait_for_blocked(watcher, "COPY rejected_events")
                assert holds_lock_on(watcher, backend, "events", "RowExclusiveLock")
                os.killpg(child.pid, signal.SIGKILL)
                assert child.wait(30) == -signal.SIGKILL
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            locker.execute("COMMIT")  # the API finishes the batch for a sender that is gone
            wait_until(lambda: len(stored_ids(url)) == 599, "the orphaned batch to commit")
        left = buffer_status(buffer)
        assert left.buffered == len(items) - 400 and left.claimed == 200  # the dead sender's claim, on disk

        with Collector(server.url, TOKEN, buffer, batch_size=200) as again:
            report = again.drain()
            local_rejects = again.rejected()
    assert report.remaining == 0
    assert report.duplicates == 199 and report.stored == len(valid) - 599 and report.rejected == len(bad)
    stored = Counter(stored_ids(url))
    assert set(stored) == ids_of([valid]) and set(stored.values()) == {1}
    assert sorted(r.event_id for r in local_rejects) == sorted(e["event_id"] for e in bad)
    # The invalid item of the orphaned batch was dead-lettered twice (its batch was sent twice); the rest once.
    assert Counter(event_id for _, event_id in dead_letter(url)) == Counter(
        {bad[0]["event_id"]: 2, **{e["event_id"]: 1 for e in bad[1:]}})
