"""The collector's sender against a contract-following API over a real loopback socket."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest

from tally_pipeline.collector import Collector, CollectorAuthError
from tally_pipeline.collector.backoff import Backoff
from tally_pipeline_tests.collector_api import (
    TOKEN,
    ContractAPI,
    Forced,
    LoopbackServer,
    volume_event,
    wait_for_outcome,
)

BACKOFF = Backoff(base=1.0, factor=2.0, max_delay=8.0, jitter=0.5)


class FakeTime:
    """A clock that only moves when the code under test sleeps; records every delay."""

    def __init__(self, start: float = 1_700_000_000.0):
        self.now = start
        self.delays: list[float] = []
        self.on_sleep: Callable[[int], None] | None = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.delays))


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def make_collector(tmp_path: Path, fake_time: FakeTime) -> Iterator[Callable[..., Collector]]:
    made: list[Collector] = []

    def make(url: str, token: str | None = TOKEN, **kwargs) -> Collector:
        kwargs.setdefault("sleep", fake_time.sleep)
        kwargs.setdefault("clock", fake_time.clock)
        kwargs.setdefault("backoff", BACKOFF)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("timeout", 10.0)
        c = Collector(url, token, kwargs.pop("buffer_dir", tmp_path / "buffer"), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def assert_backoff_shape(delays: list[float], backoff: Backoff) -> None:
    """Each delay lies in its jitter band below the exponential ceiling, which doubles up to the cap."""
    for n, delay in enumerate(delays, start=1):
        ceiling = min(backoff.max_delay, backoff.base * backoff.factor ** (n - 1))
        assert ceiling * (1 - backoff.jitter) <= delay <= ceiling, (n, delay, ceiling)
    # jitter is real: not every delay sits on its ceiling
    assert any(d < min(backoff.max_delay, backoff.base * backoff.factor ** (n - 1)) for n, d in enumerate(delays, 1))


def test_batches_hold_at_most_batch_size_and_everything_is_stored_once(api, server, make_collector):
    c = make_collector(server.url)
    events = [volume_event(i) for i in range(2500)]
    assert c.submit_many(events) == 2500
    report = c.drain()
    assert report.outcome == "empty" and report.remaining == 0
    assert report.stored == 2500 and report.requests == 3
    sizes = [len(s.event_ids) for s in api.seen]
    assert sizes == [1000, 1000, 500]
    assert set(api.stored) == {e["event_id"] for e in events}
    assert set(api.store_count.values()) == {1}
    # the API received the events exactly as submitted
    assert api.stored["ev-000042"] == events[42]


def test_smaller_batch_size_is_honoured(api, server, make_collector):
    c = make_collector(server.url, batch_size=64)
    c.submit_many(volume_event(i) for i in range(200))
    c.drain()
    assert [len(s.event_ids) for s in api.seen] == [64, 64, 64, 8]


def test_each_item_is_settled_by_its_own_outcome(api, server, make_collector):
    c = make_collector(server.url)
    api.stored["ev-000001"] = volume_event(1)  # already held: a duplicate
    api.stored["ev-000002"] = volume_event(2, resource_id="other")  # held with other content: a conflict
    bad_size = volume_event(3, payload={"size": {"gb": "ten"}})
    unknown_type = volume_event(4, resource_type="spaceship")
    c.submit_many([volume_event(0), volume_event(1), volume_event(2), bad_size, unknown_type, volume_event(5)])
    result = c.send_once()
    assert result.outcome == "sent"
    assert (result.stored, result.duplicates, result.conflicts, result.rejected) == (2, 2, 1, 2)
    assert c.buffered() == 0
    rejected = {r.event_id: r for r in c.rejected()}
    assert set(rejected) == {"ev-000003", "ev-000004"}
    assert rejected["ev-000003"].reason == "size_schema" and "gb" in rejected["ev-000003"].message
    assert rejected["ev-000004"].reason == "unknown_resource_type"
    assert all(r.origin == "api" and r.attempts == 1 for r in rejected.values())
    # the rejected log keeps the event exactly as submitted
    assert json.loads(rejected["ev-000003"].body) == bad_size


def test_backoff_on_connection_refused_then_recovery(api, make_collector, fake_time):
    srv = LoopbackServer(api.app)  # bound, not listening: connections are refused
    try:
        c = make_collector(srv.url, timeout=5.0)
        c.submit_many(volume_event(i) for i in range(10))
        fake_time.on_sleep = lambda n: srv.start() if n == 6 else None  # the API comes up during the 6th wait
        report = c.drain(retry_for=3600)
        assert report.remaining == 0 and report.stored == 10
        assert len(fake_time.delays) == 6
        assert_backoff_shape(fake_time.delays, BACKOFF)
        assert fake_time.delays[-1] <= BACKOFF.max_delay  # capped (ceiling 32 without the cap)
        assert fake_time.delays[-1] >= BACKOFF.max_delay * (1 - BACKOFF.jitter)
        assert c.status().sender["consecutive_failures"] == "0"
        assert set(api.store_count.values()) == {1}
    finally:
        srv.close()


def test_drain_without_retry_returns_at_the_first_failure_keeping_everything(make_collector, fake_time):
    srv = LoopbackServer(ContractAPI().app)
    try:
        c = make_collector(srv.url)
        c.submit_many(volume_event(i) for i in range(3))
        report = c.drain()
        assert report.outcome == "unavailable" and "ConnectError" in report.error
        assert report.remaining == 3 and fake_time.delays == []
        status = c.status()
        assert status.buffered == 3 and status.claimed == 0 and status.max_attempts == 1
        assert "ConnectError" in status.sender["last_error"]
    finally:
        srv.close()


def test_backoff_on_503_then_recovery(api, server, make_collector, fake_time):
    api.script.extend(Forced(503, {"error": "database_unavailable"}) for _ in range(4))
    c = make_collector(server.url)
    c.submit_many(volume_event(i) for i in range(5))
    report = c.drain(retry_for=3600)
    assert report.remaining == 0 and report.stored == 5
    assert len(fake_time.delays) == 4
    assert_backoff_shape(fake_time.delays, BACKOFF)
    assert [s.status for s in api.seen] == [503, 503, 503, 503, 200]


def test_429_retry_after_seconds_and_date_are_honoured(api, server, make_collector, fake_time):
    when = datetime.fromtimestamp(fake_time.now + 1 + 7 + 30, UTC)  # after the first wait of 7 s
    api.script.append(Forced(429, {"error": "slow_down"}, {"Retry-After": "7"}))
    api.script.append(Forced(429, {"error": "slow_down"}, {"Retry-After": format_datetime(when, usegmt=True)}))
    api.script.append(Forced(503, {"error": "x"}, {"Retry-After": "0"}))
    c = make_collector(server.url)
    c.submit(volume_event(1))
    report = c.drain(retry_for=3600)
    assert report.stored == 1
    assert fake_time.delays[0] == 7.0
    assert 29.0 <= fake_time.delays[1] <= 31.0
    # a Retry-After below the backoff is only a floor: the third failure waits its jittered backoff
    assert BACKOFF.base * 4 * (1 - BACKOFF.jitter) <= fake_time.delays[2] <= BACKOFF.base * 4


def test_drain_gives_up_when_the_next_wait_would_pass_its_deadline(api, server, make_collector, fake_time):
    api.script.extend(Forced(503) for _ in range(100))
    c = make_collector(server.url)
    c.submit(volume_event(1))
    report = c.drain(retry_for=10)
    assert sum(fake_time.delays) <= 10
    assert report.outcome == "unavailable" and report.remaining == 1
    assert len(api.seen) == len(fake_time.delays) + 1


def test_413_batch_too_large_splits_and_learns_the_limit(make_collector, tmp_path):
    small = ContractAPI(max_batch=300)
    with LoopbackServer(small.app) as srv:
        srv.start()
        c = make_collector(srv.url, buffer_dir=tmp_path / "b413")
        c.submit_many(volume_event(i) for i in range(1000))
        report = c.drain()
        assert report.remaining == 0 and report.stored == 1000
        statuses = [(s.status, len(s.event_ids)) for s in small.seen]
        assert statuses[0] == (413, 1000)
        assert all(n <= 300 for st, n in statuses[1:]) and all(st == 200 for st, _ in statuses[1:])
        # later batches are claimed at the learned size, without another 413
        c.submit_many(volume_event(i) for i in range(1000, 1700))
        c.drain()
        assert [s.status for s in small.seen].count(413) == 1
        assert set(small.store_count.values()) == {1} and len(small.stored) == 1700


def test_413_body_too_large_splits_by_bytes_and_rejects_an_event_too_large_alone(make_collector, tmp_path):
    api = ContractAPI(max_body=20_000)
    with LoopbackServer(api.app) as srv:
        srv.start()
        c = make_collector(srv.url, buffer_dir=tmp_path / "bbody")
        huge = volume_event(999, payload={"size": {"gb": 1}, "note": "x" * 30_000})
        c.submit_many([*(volume_event(i) for i in range(200)), huge])
        report = c.drain()
        assert report.remaining == 0
        assert report.stored == 200 and report.rejected_locally == 1
        assert all(s.size <= 20_000 for s in api.seen if s.status == 200)
        (rejected,) = c.rejected()
        assert rejected.event_id == "ev-000999" and rejected.reason == "event_too_large"
        assert rejected.origin == "local" and "20000" in rejected.message
        assert "ev-000999" not in api.stored and len(api.stored) == 200


def test_413_without_a_stated_limit_halves_down_to_the_offending_event(api, server, make_collector):
    c = make_collector(server.url)
    c.submit_many(volume_event(i) for i in range(8))
    # a proxy that says 413 with an HTML page, three times: 8 -> 4 -> 2 -> 1
    api.script.extend(Forced(413, b"<html>too big</html>") for _ in range(4))
    report = c.drain()
    assert report.remaining == 0
    assert report.rejected_locally == 1 and report.stored == 7
    (rejected,) = c.rejected()
    assert rejected.reason == "event_too_large" and "too big" in rejected.message
    assert [len(s.event_ids) for s in api.seen[:4]] == [8, 4, 2, 1]


def test_401_stops_sending_and_keeps_everything(server, make_collector):
    c = make_collector(server.url, token="wrong")
    c.submit_many(volume_event(i) for i in range(3))
    with pytest.raises(CollectorAuthError) as info:
        c.drain(retry_for=3600)
    assert info.value.status == 401 and info.value.buffered == 3
    assert "token" in str(info.value) and "3 events stay buffered" in str(info.value)
    assert c.buffered() == 3 and c.rejected() == []


def test_403_is_reported_as_a_scope_problem(api, server, make_collector):
    api.script.append(Forced(403, {"error": "forbidden", "detail": "scope ingest:c1 required"}))
    c = make_collector(server.url)
    c.submit(volume_event(1))
    with pytest.raises(CollectorAuthError, match="scope") as info:
        c.drain()
    assert info.value.status == 403 and c.buffered() == 1


def test_background_sender_stops_on_401_and_surfaces_the_error(server, make_collector):
    c = make_collector(server.url, token="wrong", sleep=None)
    c.submit(volume_event(1))
    c.start()
    assert c.wait_until_empty(timeout=30) is False
    assert not c.running
    assert isinstance(c.sender_error, CollectorAuthError) and c.sender_error.status == 401
    assert c.buffered() == 1


def test_400_keeps_the_items_and_backs_off(api, server, make_collector, fake_time):
    api.script.extend([Forced(400, {"error": "invalid_body", "detail": "odd"}), Forced(400, {"error": "invalid_body"})])
    c = make_collector(server.url)
    c.submit_many(volume_event(i) for i in range(4))
    first = c.send_once()
    assert first.outcome == "refused" and first.kept == 4 and "invalid_body" in first.error
    report = c.drain(retry_for=3600)
    assert report.remaining == 0 and report.stored == 4
    assert len(fake_time.delays) == 1 and BACKOFF.base <= fake_time.delays[0] <= BACKOFF.base * 2


def test_an_answer_that_does_not_account_for_every_item_keeps_the_unaccounted(api, server, make_collector):
    c = make_collector(server.url)
    c.submit_many(volume_event(i) for i in range(3))
    partial = {"results": [{"index": 0, "event_id": "ev-000000", "status": "stored"},
                           {"index": 1, "event_id": "ev-000999", "status": "stored"}],
               "stored": 2, "duplicates": 0, "rejected": 0}
    api.script.append(Forced(200, partial))
    api.script.append(Forced(200, b"not json"))
    first = c.send_once()
    assert first.outcome == "refused" and first.stored == 1 and first.kept == 2
    assert "ev-000999" in first.error
    second = c.send_once()
    assert second.outcome == "refused" and second.kept == 2 and "unreadable" in second.error
    assert [i.event_id for i in c.buffer.items()] == ["ev-000001", "ev-000002"]
    assert c.drain().remaining == 0


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_any_drain_order_and_a_failed_batch_overtaken_by_later_ones(api, server, make_collector, order):
    c = make_collector(server.url, batch_size=10, order=order)
    c.submit_many(volume_event(i) for i in range(35))
    api.script.append(Forced(503))
    assert c.send_once().outcome == "unavailable"  # the first batch fails and goes back
    # a second sender on the same directory takes the next batch while the first one is released
    other = make_collector(server.url, batch_size=10, order="newest" if order == "oldest" else "oldest")
    assert other.send_once().stored == 10
    report = c.drain()
    assert report.remaining == 0
    assert set(api.stored) == {f"ev-{i:06d}" for i in range(35)}
    assert set(api.store_count.values()) == {1}
    first_sent = [s.event_ids for s in api.seen]
    expected_first = [f"ev-{i:06d}" for i in (range(10) if order == "oldest" else range(34, 24, -1))]
    assert first_sent[0] == expected_first


def test_background_sender_delivers_what_is_submitted(api, server, make_collector):
    c = make_collector(server.url, sleep=None, idle_interval=0.2, linger=0.01)
    c.start()
    for i in range(50):
        c.submit(volume_event(i))
    c.submit_many(volume_event(i) for i in range(50, 1500))
    assert c.wait_until_empty(timeout=60)
    c.stop()
    assert not c.running
    assert len(api.stored) == 1500 and set(api.store_count.values()) == {1}
    assert all(len(s.event_ids) <= 1000 for s in api.seen)


def test_background_sender_rides_out_an_outage(api, make_collector):
    srv = LoopbackServer(api.app)
    try:
        c = make_collector(srv.url, sleep=None, backoff=Backoff(base=0.01, max_delay=0.05), idle_interval=0.1)
        c.submit_many(volume_event(i) for i in range(20))
        c.start()
        assert wait_for_outcome(c, "unavailable")  # nothing listens yet
        assert c.buffered() == 20
        srv.start()
        assert c.wait_until_empty(timeout=60)
        assert len(api.stored) == 20 and set(api.store_count.values()) == {1}
    finally:
        srv.close()


def test_stop_ends_a_long_backoff_at_once(api, make_collector):
    srv = LoopbackServer(api.app)  # refused
    try:
        c = make_collector(srv.url, sleep=None, backoff=Backoff(base=3600, max_delay=3600))
        c.submit(volume_event(1))
        c.start()
        thread = c._thread
        assert wait_for_outcome(c, "unavailable")  # so it is now waiting out an hour
        c.stop(timeout=30)
        assert thread is not None and not thread.is_alive()
        assert c.buffered() == 1
    finally:
        srv.close()
