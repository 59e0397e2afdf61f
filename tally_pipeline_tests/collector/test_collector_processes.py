"""Collectors in separate processes: killed mid-send, or two senders sharing one buffer directory."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from tally_pipeline.collector import Collector, buffer_status
from tally_pipeline_tests.collector_api import TOKEN, ContractAPI, LoopbackServer, volume_event

SEND = """
    import sys
    from tally_pipeline.collector import Collector
    c = Collector(sys.argv[1], sys.argv[2], sys.argv[3], batch_size=500)
    c.drain()
    print("drained", flush=True)
"""


@pytest.mark.slow
def test_collector_killed_mid_send_then_restarted_loses_nothing(tmp_path):
    api = ContractAPI()
    release = threading.Event()
    api.hold, api.hold_from = release, 2  # the third batch is stored, but its answer never arrives
    with LoopbackServer(api.app) as srv:
        srv.start()
        with Collector(srv.url, TOKEN, tmp_path) as c:
            c.submit_many(volume_event(i) for i in range(2500))
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(SEND), srv.url, TOKEN, str(tmp_path)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert api.held.wait(60), "the child never reached the third batch"
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == -signal.SIGKILL
        api.hold = None
        release.set()

        left = buffer_status(tmp_path)
        assert left.buffered == 1500  # two batches were answered and deleted
        assert left.claimed == 500  # the dead sender's claim on the third is still on disk

        with Collector(srv.url, TOKEN, tmp_path, batch_size=500) as again:
            report = again.drain()
        assert report.remaining == 0
        assert report.duplicates == 500 and report.stored == 1000
        assert len(api.stored) == 2500 and set(api.store_count.values()) == {1}
        assert buffer_status(tmp_path).buffered == 0


DRAIN_AND_REPORT = """
    import json, sys
    from tally_pipeline.collector import Collector
    with Collector(sys.argv[1], sys.argv[2], sys.argv[3], batch_size=100) as c:
        report = c.drain()
    print(json.dumps({"stored": report.stored, "duplicates": report.duplicates, "remaining": report.remaining}))
"""


@pytest.mark.slow
def test_two_sender_processes_on_one_buffer_claim_disjoint_batches(tmp_path):
    api = ContractAPI()
    release = threading.Event()
    api.hold = release  # every answer waits until both senders have a request in flight
    with LoopbackServer(api.app) as srv:
        srv.start()
        with Collector(srv.url, TOKEN, tmp_path) as c:
            c.submit_many(volume_event(i) for i in range(3000))
        children = [
            subprocess.Popen([sys.executable, "-c", textwrap.dedent(DRAIN_AND_REPORT), srv.url, TOKEN, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            assert api.wait_seen(2, timeout=60), "both senders should have a batch in flight"
            first, second = api.seen[0].event_ids, api.seen[1].event_ids
            assert len(first) == len(second) == 100
            assert not set(first) & set(second)
            # meanwhile this process keeps submitting into the same buffer
            with Collector(srv.url, TOKEN, tmp_path) as c:
                c.submit_many(volume_event(i) for i in range(3000, 3500))
            api.hold = None
            release.set()
            reports = [json.loads(child.communicate(timeout=120)[0]) for child in children]
        finally:
            for child in children:
                child.kill()
                child.wait()
        assert all(child.returncode == 0 for child in children)
        assert all(r["stored"] >= 100 and r["duplicates"] == 0 for r in reports)
        with Collector(srv.url, TOKEN, tmp_path) as c:
            rest = c.drain()  # whatever arrived after both senders found the buffer empty
            assert c.buffer.pragma("integrity_check") == "ok"
        assert sum(r["stored"] for r in reports) + rest.stored == 3500
        assert len(api.stored) == 3500 and set(api.store_count.values()) == {1}
        assert buffer_status(tmp_path).buffered == 0
