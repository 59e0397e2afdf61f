"""The buffer on a disk that fills (a tmpfs of its own), and the rejected log's bound in bytes.

A full disk must not wedge the buffer: new events are refused (nothing of an offer is kept), what it
holds still goes out, the space comes back, and it takes events again. Poison costs a few KiB on disk
whatever its size, and the rejected log as a whole keeps at most ``max_rejected_bytes``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tally_pipeline.collector import Collector
from tally_pipeline.collector.buffer import _SCHEMA, DB_NAME, RESERVE_NAME, BusRejection, DiskBuffer
from tally_pipeline.collector.errors import BufferDiskFull
from tally_pipeline.collector.intake import EXCERPT_BYTES, raw_copy
from tally_pipeline.collector.protocol import encode_event
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.tmpfs import free_bytes, small_disk

MiB = 1 << 20


def entries(start: int, n: int) -> list[tuple[str | None, str, int]]:
    out = []
    for i in range(start, start + n):
        event = volume_event(i)
        event["payload"]["note"] = "n" * 1000  # events of about 1.5 KB, as the collector's are
        event_id, body = encode_event(event)
        out.append((event_id, body, len(body.encode())))
    return out


def on_disk(buffer_dir: Path) -> int:
    return sum(p.stat().st_size for p in buffer_dir.iterdir() if p.is_file() and p.name != RESERVE_NAME)


@pytest.mark.parametrize("disk_mib, reserve_mib", [(16, 4), (12, 8)])  # a reserve of most of the disk too
def test_a_full_disk_refuses_new_events_and_still_drains_everything_it_holds(disk_mib: int, reserve_mib: int) -> None:
    reserve = reserve_mib * MiB
    with small_disk(disk_mib * MiB) as disk:
        buf = DiskBuffer(disk / "buffer", reserve_bytes=reserve)
        try:
            assert (disk / "buffer" / RESERVE_NAME).stat().st_size == reserve
            offered = 0
            with pytest.raises(BufferDiskFull, match="is full"):
                for _ in range(1000):
                    buf.append(entries(offered, 100), now=time.time())
                    offered += 100
            held = buf.count()
            assert held == offered > 0  # the refused offer left nothing half-buffered
            assert buf.disk_full is not None and buf.gauges().disk_full
            assert not (disk / "buffer" / RESERVE_NAME).exists()  # given back for the drain
            with pytest.raises(BufferDiskFull):  # still refused: no room came back yet
                buf.append(entries(offered, 1), now=time.time())
            sent: list[str | None] = []
            while items := buf.claim(limit=1000, max_bytes=None, order="oldest", now=time.time()):
                sent.extend(i.event_id for i in items)
                buf.settle(done=[i.seq for i in items], rejected=(), now=time.time())
            assert sorted(sent) == sorted(e for e, _, _ in entries(0, held))  # every one, once
            assert buf.count() == 0 and buf.disk_full is None and not buf.gauges().disk_full
            assert (disk / "buffer" / RESERVE_NAME).stat().st_size == reserve  # the reserve is back
            assert free_bytes(disk) > (disk_mib - reserve_mib - 1) * MiB  # the pages went back to the file system
            buf.append(entries(offered, 100), now=time.time())  # and it takes events again
            assert buf.count() == 100
        finally:
            buf.close()


def test_a_buffer_started_on_a_full_disk_refuses_events_until_there_is_room() -> None:
    with small_disk(4 * MiB) as disk:
        filler = disk / "filler"
        filler.write_bytes(b"x" * (3 * MiB))
        buf = DiskBuffer(disk / "buffer", reserve_bytes=1 * MiB)  # no room for the reserve and 1 MiB more
        try:
            assert buf.disk_full is not None and "reserve" in buf.disk_full
            with pytest.raises(BufferDiskFull):
                buf.append(entries(0, 1), now=time.time())
            filler.unlink()
            buf.append(entries(0, 1), now=time.time())
            assert buf.count() == 1 and buf.disk_full is None
        finally:
            buf.close()


def rejection(body: bytes, n: int) -> BusRejection:
    copy = raw_copy(body)
    return BusRejection(f"m-{n}", copy.excerpt, "unparseable", "not JSON", copy.size, copy.digest)


def test_poison_costs_a_few_kib_on_disk_and_says_what_it_was(tmp_path: Path) -> None:
    buf = DiskBuffer(tmp_path, reserve_bytes=0)
    try:
        before = on_disk(tmp_path)
        poison = [os.urandom(MiB) for _ in range(25)]
        for n, body in enumerate(poison):
            buf.append((), now=time.time(), rejected=[rejection(body, n)])
        grown = on_disk(tmp_path) - before
        logged = buf.rejected()
    finally:
        buf.close()
    assert grown < 25 * 64 * 1024  # was about 3.3 MB a message
    assert len(logged) == 25
    for row, body in zip(reversed(logged), poison, strict=True):
        assert row.size == MiB and row.digest == hashlib.sha256(body).hexdigest()
        assert len(row.body.encode()) < EXCERPT_BYTES + 100 and row.body.endswith("bytes of its text kept]")


def test_the_rejected_log_keeps_at_most_its_bytes_dropping_the_oldest_counted(tmp_path: Path) -> None:
    with Collector("http://127.0.0.1:9", None, tmp_path, max_rejected_bytes=100_000, reserve_bytes=0) as c:
        for n in range(60):  # about 4 KiB each: some 25 fit
            c.submit_encoded([], rejected=[rejection(os.urandom(10_000), n)])
        kept = c.rejected()
        gauges = c.buffer.gauges()
    assert gauges.rejected_bytes <= 100_000 and gauges.rejected == len(kept)
    assert gauges.rejected_dropped == 60 - len(kept) > 0
    assert [r.event_id for r in kept] == [f"m-{n}" for n in range(59, 59 - len(kept), -1)]  # the newest stay
    assert gauges.rejected_bytes == sum(len(r.body.encode()) + len(r.message.encode()) for r in kept if r.message)


def test_a_version_1_buffer_is_migrated_with_its_rejected_bytes_counted(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)
    con.executescript(_SCHEMA)
    con.execute("INSERT INTO rejected (event_id, body, reason, message, origin, enqueued_at, rejected_at, attempts) "
                "VALUES ('m', 'héllo', 'unparseable', 'why', 'bus', 1, 1, 0)")
    con.execute("PRAGMA user_version = 1")
    con.close()
    buf = DiskBuffer(tmp_path, reserve_bytes=0)
    try:
        assert buf.pragma("user_version") == 2
        assert buf.gauges().rejected_bytes == len("héllo".encode()) + len("why")
        buf.append((), now=2.0, rejected=[BusRejection("n", "abc", "invalid", "no", 3, "d")])
        assert buf.gauges().rejected_bytes == len("héllo".encode()) + 3 + 3 + 2
        assert [(r.size, r.digest) for r in buf.rejected()] == [(3, "d"), (None, None)]
    finally:
        buf.close()
