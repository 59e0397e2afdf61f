"""The collector's on-disk buffer: durability, bounds, strict JSON, claims between instances."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tally_pipeline.collector import BufferFull, Collector, buffer_status
from tally_pipeline.collector.buffer import DB_NAME, BusRejection, DiskBuffer, RejectionNote
from tally_pipeline.collector.protocol import encode_event
from tally_pipeline_tests.collector_api import volume_event

NOWHERE = "http://127.0.0.1:9"  # never contacted in these tests


def open_collector(buffer_dir: Path, **kwargs) -> Collector:
    return Collector(NOWHERE, None, buffer_dir, **kwargs)


def encode_entry(event: dict) -> tuple[str | None, str, int]:
    event_id, body = encode_event(event)
    return event_id, body, len(body.encode())


def test_a_fresh_collector_sees_everything_submitted(tmp_path):
    events = [volume_event(i) for i in range(120)]
    with open_collector(tmp_path) as c:
        for e in events[:20]:
            c.submit(e)
        c.submit_many(events[20:])
    with open_collector(tmp_path) as again:
        items = again.buffer.items()
    assert [json.loads(i.body) for i in items] == events
    assert [i.event_id for i in items] == [e["event_id"] for e in events]
    assert all(i.attempts == 0 for i in items)
    assert all(i.size == len(i.body.encode()) for i in items)


def test_the_buffer_commits_with_fsync(tmp_path):
    with open_collector(tmp_path) as c:
        assert c.buffer.pragma("journal_mode") == "wal"
        # The sender's transactions are not synced on their own (a lost one only sends events again)...
        c.buffer.claim(limit=10, max_bytes=None, order="oldest", now=0.0)
        assert c.buffer.pragma("synchronous") == 1  # NORMAL
        # ...what takes events in is: FULL, the WAL synced at its commit, whatever ran before it.
        c.submit({"event_id": "e1", "n": 1})
        assert c.buffer.pragma("synchronous") == 2  # FULL


def _child(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


SUBMIT_FOREVER = """
    import sys
    from tally_pipeline.collector import Collector
    from tally_pipeline_tests.collector_api import volume_event
    c = Collector("http://127.0.0.1:9", None, sys.argv[1])
    i = 0
    while True:
        if i % 10 == 0:
            c.submit_many([volume_event(i + k) for k in range(10)])
            i += 10
        else:
            c.submit(volume_event(i))
            i += 1
        print(i, flush=True)  # every event below i is durable
"""


def test_nothing_confirmed_is_lost_when_the_submitter_is_sigkilled(tmp_path):
    child = _child(SUBMIT_FOREVER, str(tmp_path))
    try:
        confirmed = 0
        for line in child.stdout:
            confirmed = int(line)
            if confirmed >= 300:
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    with open_collector(tmp_path) as c:
        ids = [i.event_id for i in c.buffer.items()]
        integrity = c.buffer._con.execute("PRAGMA integrity_check").fetchone()[0]
    assert integrity == "ok"
    assert set(ids) >= {f"ev-{i:06d}" for i in range(confirmed)}
    assert len(ids) == len(set(ids))
    # the child may have committed more after its last confirmation, but only whole submits
    assert ids == [f"ev-{i:06d}" for i in range(len(ids))]


SUBMIT_ONCE_THEN_WAIT = """
    import sys
    from tally_pipeline.collector import Collector
    from tally_pipeline_tests.collector_api import volume_event
    c = Collector("http://127.0.0.1:9", None, sys.argv[1])
    c.submit(volume_event(7))
    print("submitted", flush=True)
    sys.stdin.read()
"""


def test_an_event_is_durable_the_moment_submit_returns(tmp_path):
    child = _child(SUBMIT_ONCE_THEN_WAIT, str(tmp_path))
    try:
        assert child.stdout.readline().strip() == "submitted"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    with open_collector(tmp_path) as c:
        assert [json.loads(i.body) for i in c.buffer.items()] == [volume_event(7)]
    # the dead process's sender lock was swept when the buffer was opened again
    assert list((tmp_path / "senders").glob("*.lock")) == []


def test_a_full_buffer_refuses_clearly_and_never_drops(tmp_path):
    with open_collector(tmp_path, max_buffered=5) as c:
        c.submit_many(volume_event(i) for i in range(4))
        with pytest.raises(BufferFull) as info:
            c.submit_many(volume_event(i) for i in range(4, 6))
        assert c.buffered() == 4  # all or none
        assert (info.value.buffered, info.value.limit, info.value.offered) == (4, 5, 2)
        assert "4 events buffered, limit 5" in str(info.value)
        c.submit(volume_event(4))
        with pytest.raises(BufferFull, match="5 events buffered, limit 5"):
            c.submit(volume_event(5))
        assert [i.event_id for i in c.buffer.items()] == [f"ev-{i:06d}" for i in range(5)]


def test_the_byte_bound_is_enforced_too(tmp_path):
    one = len(json.dumps(volume_event(1), separators=(",", ":")))
    with open_collector(tmp_path, max_buffered_bytes=3 * one + 10) as c:
        c.submit_many(volume_event(i) for i in range(1, 4))
        with pytest.raises(BufferFull, match="bytes buffered") as info:
            c.submit(volume_event(4))
        assert info.value.unit == "bytes" and info.value.buffered == c.status().buffered_bytes
        assert c.buffered() == 3


@pytest.mark.parametrize(
    ("event", "error"),
    [
        ({"event_id": "a", "payload": {"x": math.nan}}, ValueError),
        ({"event_id": "a", "payload": {"x": math.inf}}, ValueError),
        ({"event_id": "a", "payload": {"x": "\ud800"}}, ValueError),
        ({"event_id": "a", "payload": {"x": object()}}, ValueError),
        (["not", "an", "object"], TypeError),
    ],
)
def test_what_the_api_could_not_parse_is_refused_at_submit(tmp_path, event, error):
    with open_collector(tmp_path) as c:
        with pytest.raises(error):
            c.submit_many([volume_event(1), event])
        assert c.buffered() == 0


def test_events_the_api_will_reject_are_still_buffered(tmp_path):
    """The collector does not judge envelopes: the API does, and its verdict lands in the rejected log."""
    with open_collector(tmp_path) as c:
        c.submit({"no": "event_id"})
        c.submit({"event_id": 12})
        assert [i.event_id for i in c.buffer.items()] == [None, None]


def test_a_live_senders_claims_are_left_alone_and_released_on_close(tmp_path):
    a = DiskBuffer(tmp_path)
    b = DiskBuffer(tmp_path)
    try:
        a.append([(f"e{i}", "{}", 2) for i in range(6)], now=0.0)
        mine = a.claim(limit=4, max_bytes=None, order="oldest", now=1.0)
        assert [i.event_id for i in mine] == ["e0", "e1", "e2", "e3"]
        assert b.recover_dead_claims() == 0
        theirs = b.claim(limit=10, max_bytes=None, order="oldest", now=1.0)
        assert [i.event_id for i in theirs] == ["e4", "e5"]
        # b may not settle what a holds
        b.settle(done=[i.seq for i in mine], rejected=(), now=2.0)
        assert a.count() == 6
        a.close()
        assert b.release_all() == 2
        assert b.unclaimed() == 6
    finally:
        a.close()
        b.close()


def test_claims_respect_the_byte_budget_but_always_take_one(tmp_path):
    buf = DiskBuffer(tmp_path)
    try:
        buf.append([("big", "x" * 100, 100), ("a", "y" * 10, 10), ("b", "z" * 10, 10)], now=0.0)
        assert [i.event_id for i in buf.claim(limit=10, max_bytes=50, order="oldest", now=1.0)] == ["big"]
        # each body costs its size plus a comma: 11 + 11 = 22 bytes for two
        assert [i.event_id for i in buf.claim(limit=10, max_bytes=21, order="oldest", now=1.0)] == ["a"]
        buf.release_all()
        assert [i.event_id for i in buf.claim(limit=10, max_bytes=22, order="newest", now=1.0)] == ["b", "a"]
    finally:
        buf.close()


def test_status_of_a_buffer(tmp_path):
    with open_collector(tmp_path, clock=lambda: 1000.0) as c:
        c.submit_many(volume_event(i) for i in range(3))
    status = buffer_status(tmp_path, now=1090.0)
    assert status.buffered == 3 and status.claimed == 0 and status.rejected == 0
    assert status.oldest_age == 90.0
    assert status.path == str(tmp_path / DB_NAME)
    with pytest.raises(FileNotFoundError, match="no collector buffer"):
        buffer_status(tmp_path / "missing")


def test_a_newer_buffer_schema_is_refused(tmp_path):
    open_collector(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as con:
        con.execute("PRAGMA user_version = 99")
    from tally_pipeline.collector.errors import BufferSchemaError

    with pytest.raises(BufferSchemaError, match="version 99"):
        open_collector(tmp_path)
    assert os.path.exists(tmp_path / DB_NAME)


def _bus(n: int, reason: str = "unparseable") -> BusRejection:
    return BusRejection(f"m-{n}", f"raw body {n} \\xff", reason, f"why {n}")


def test_events_and_bus_rejections_go_in_together_or_not_at_all(tmp_path):
    with open_collector(tmp_path, max_buffered=3) as c:
        entries = [encode_entry(volume_event(i)) for i in range(2)]
        c.submit_encoded(entries, rejected=[_bus(1), _bus(2, "unknown_type")])
        with pytest.raises(BufferFull):
            c.submit_encoded([encode_entry(volume_event(i)) for i in range(2, 4)], rejected=[_bus(3)])
        assert c.buffered() == 2
        logged = c.rejected()
        gauges = c.buffer.gauges()
    assert [(r.event_id, r.reason, r.origin, r.attempts) for r in logged] == [
        ("m-2", "unknown_type", "bus", 0), ("m-1", "unparseable", "bus", 0)]
    assert logged[0].body == "raw body 2 \\xff" and logged[0].message == "why 2"
    assert (gauges.buffered, gauges.rejected, gauges.bus_rejections_dropped) == (2, 2, 0)
    assert gauges.buffered_bytes == sum(size for _, _, size in entries) and gauges.oldest_enqueued_at is not None


def test_requeue_leaves_bus_messages_in_the_rejected_log(tmp_path):
    with open_collector(tmp_path) as c:
        c.submit_encoded([], rejected=[_bus(1, "invalid")])
        c.buffer.append([encode_entry(volume_event(9))], now=1.0)
        (item,) = c.buffer.claim(limit=10, max_bytes=None, order="oldest", now=2.0)
        c.buffer.settle(done=(), rejected=[RejectionNote(item.seq, "invalid", "the API said no", "api")], now=3.0)
        assert c.buffer.requeue_rejected(reason="invalid", now=4.0) == 1
        assert [r.origin for r in c.rejected()] == ["bus"] and c.buffered() == 1


def test_bus_rejections_beyond_the_cap_drop_the_oldest_and_count_them(tmp_path):
    with open_collector(tmp_path, max_bus_rejections=3) as c:
        c.submit_encoded([], rejected=[_bus(n) for n in range(2)])
        c.submit_encoded([], rejected=[_bus(n) for n in range(2, 6)])
        assert [r.event_id for r in c.rejected()] == ["m-5", "m-4", "m-3"]
        assert c.buffer.gauges().bus_rejections_dropped == 3
