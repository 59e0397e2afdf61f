"""``tally collect openstack`` as a real process between the machine's RabbitMQ (a vhost per test) and a real
``tally serve`` on Postgres, with the services played by oslo.messaging's own notifiers sending the
official samples, and ceilometer played by oslo.messaging's listener in a pool of its own.

What must hold whatever happens (SIGKILL mid-stream, the API down then up, the broker's connections
cut): every published notification that maps to an event is stored exactly once, dated as the
mapping says; poison messages land in the rejected log and the stream behind them flows; the other
pool still gets every message.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tally_pipeline.bench.collector_process import CollectorProcess
from tally_pipeline.bench.oslo_bus import PoolListener, ServicePublishers
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.collector.buffer import buffer_status
from tally_pipeline.config import CollectorSettings
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.providers.openstack.notifications import Unmapped, map_notification
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file, wait_until
from tally_pipeline_tests.providers.openstack.notification_samples import sample, service_samples, versioned_sample
from tally_pipeline_tests.rabbit import EXCHANGE_OF, EXCHANGES, TOPICS, VHost
from tally_pipeline_tests.tmpfs import small_disk

MiB = 1 << 20

CLOUD = "region-one"


@dataclass
class Cloud:
    """The cloud's bus: its services' notifiers, and ceilometer's pool listening since before they publish."""

    vhost: VHost
    publishers: ServicePublishers
    ceilometer: PoolListener
    published: int = 0

    def publish(self, messages: list[tuple[str, str, dict[str, Any]]]) -> None:
        for exchange, topic, message in messages:
            self.publishers.publish(exchange, topic, message)
            self.published += 1

    def heard(self) -> int:
        """Distinct notifications ceilometer's pool heard (a message redelivered after a cut is one)."""
        return len({h.metadata["message_id"] for h in self.ceilometer.heard})

    def expected_events(self) -> dict[str, dict[str, Any]]:
        """What the mapping makes of every notification ceilometer heard (the notifier's message ids and
        times included), by event id."""
        wait_until(lambda: self.heard() >= self.published, "ceilometer's pool to hear everything", 120)
        events = {}
        for heard in self.ceilometer.heard:
            event = map_notification(heard.as_message(), cloud=CLOUD)
            if not isinstance(event, Unmapped):
                events[event["event_id"]] = event
        return events


@pytest.fixture
def cloud(vhost: VHost) -> Iterator[Cloud]:
    ceilometer = PoolListener(vhost.transport_url(), "ceilometer", EXCHANGES, TOPICS).start()
    # Ceilometer declares the services' exchanges and binds its queue, as in a running cloud.
    vhost.wait_for_bindings({(e, "ceilometer", f"{t}.info") for e in EXCHANGES for t in TOPICS})
    publishers = ServicePublishers(vhost.transport_url())
    try:
        yield Cloud(vhost, publishers, ceilometer)
    finally:
        publishers.close()
        ceilometer.stop()
        ceilometer.close()


@pytest.fixture
def api_files(tmp_path: Path, pg_url: str) -> tuple[str, Path, Path]:
    """A migrated Postgres database, the API's tokens file and the collector's token file."""
    token = tmp_path / "collector.token"
    token.write_text(TOKEN + "\n")
    return migrate(pg_url), tokens_file(tmp_path), token


def collector(cloud: Cloud, api_url: str, tmp_path: Path, token: Path | None, *, buffer_dir: Path | None = None,
              **config: Any) -> CollectorProcess:
    settings = {"batch_timeout": 0.05, "drain_timeout": 10, "reconnect_max_delay": 2, **config}
    path = tmp_path / "collector.yaml"
    path.write_text(json.dumps({"collector": settings}))
    return CollectorProcess(cloud=CLOUD, transport_url=cloud.vhost.transport_url(), api_url=api_url,
                            buffer_dir=buffer_dir or tmp_path / "buffer", token_file=token, config=path,
                            log_path=tmp_path / "collector.log")


def stored(url: str) -> dict[str, tuple[str, str, str, Any]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT event_id, event_type, resource_type, resource_id, occurred_at FROM events "
                            "WHERE cloud = %s", (CLOUD,)).fetchall()
    found = {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}
    assert len(found) == len(rows)
    return found


def assert_stored_as_mapped(url: str, expected: dict[str, dict[str, Any]]) -> None:
    wait_until(lambda: len(stored(url)) >= len(expected), f"{len(expected)} events stored", 120)
    got = stored(url)
    assert set(got) == set(expected)
    for event_id, e in expected.items():
        assert got[event_id] == (e["event_type"], e["resource_type"], e["resource_id"],
                                 parse_rfc3339(e["occurred_at"])), event_id


POISON = [
    b"not json {",
    b'["a", "list"]',
    json.dumps({"oslo.version": "2.0", "oslo.message": "{half an envelope"}).encode(),
]


@pytest.mark.slow
def test_samples_are_stored_as_mapped_poison_is_logged_and_ceilometer_keeps_its_copy(
        cloud: Cloud, api_files: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, api_tokens, token = api_files
    with ServeProcess(url, tokens_file=api_tokens, log_path=tmp_path / "serve.log") as api:
        api.start()
        with collector(cloud, api.url, tmp_path, token) as c:
            c.start(bound=len(EXCHANGES))
            for body in POISON:  # first, so the stream behind them must flow past them
                cloud.vhost.publish_raw("nova", "notifications.info", body)
            unknown = {"event_type": "telemetry.polling", "priority": "INFO", "payload": {"x": 1}}
            broken = sample("cinder/volume.create.end.json")
            broken["payload"]["size"] = "big"
            cinder = EXCHANGE_OF["cinder"]
            cloud.publish([(cinder, "notifications", unknown), (cinder, "notifications", broken)])
            samples = service_samples()
            cloud.publish(samples)
            expected = cloud.expected_events()
            # the samples' creates, deletes, resizes, restores, power actions, retype and transfer of five
            # services, and nova's create request (instance.create.start), kept as a note since billing
            # starts at the launch
            assert len(expected) == 28
            assert_stored_as_mapped(url, expected)
            wait_until(lambda: c.metric("tally_collector_received_total") == cloud.published + len(POISON),
                       "every message counted")
            metrics = c.samples()
            assert c.stop() == 0
    # ceilometer's pool heard every notification the services sent; ours took nothing from it
    assert cloud.heard() == cloud.published == len(samples) + 2
    by_topic = {t: sum(1 for _, topic, _ in samples if topic == t) for t in TOPICS}
    assert metrics[("tally_collector_received_total", (("exchange", "nova"), ("topic", "versioned_notifications")))] \
        == by_topic["versioned_notifications"]
    assert metrics[("tally_collector_received_total", (("exchange", "openstack"), ("topic", "notifications")))] == 9
    assert metrics[("tally_collector_mapped_total", ())] == 28
    assert metrics[("tally_collector_rejected_total", (("reason", "unparseable"),))] == 3
    assert metrics[("tally_collector_rejected_total", (("reason", "unknown_type"),))] == 1
    assert metrics[("tally_collector_rejected_total", (("reason", "invalid"),))] == 1
    assert metrics[("tally_collector_ignored_total", (("reason", "error_priority"),))] == 1
    assert metrics[("tally_collector_sent_total", (("outcome", "stored"),))] == 28
    assert metrics[("tally_collector_broker_connected", ())] == 1
    assert metrics[("tally_collector_last_message_timestamp_seconds", (("exchange", "octavia"),))] > 0

    from click.testing import CliRunner

    from tally_pipeline.cli import main

    shown = CliRunner().invoke(main, ["collector", "rejected", "--buffer-dir", str(tmp_path / "buffer"), "--json"])
    rejected = json.loads(shown.output)
    assert sorted(r["reason"] for r in rejected) == ["invalid", "unknown_type", "unparseable", "unparseable",
                                                     "unparseable"]
    assert {r["raw"] for r in rejected if r["reason"] == "unparseable"} == {b.decode() for b in POISON}
    assert all(r["origin"] == "bus" and r["message"] for r in rejected)
    invalid = next(r for r in rejected if r["reason"] == "invalid")
    assert json.loads(json.loads(invalid["raw"])["oslo.message"])["payload"]["size"] == "big"


def stream(i: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Four notifications of distinct resources, one of which changes no usage."""
    volume = sample("cinder/volume.create.end.json")
    volume["payload"]["volume_id"] = f"vol-{i}"
    image = sample("glance/image.upload.json")
    image["payload"]["id"] = f"img-{i}"
    server = versioned_sample("instance-create-end", message_id="-", timestamp="-", uuid=f"vm-{i}")
    cinder = EXCHANGE_OF["cinder"]
    return [(cinder, "notifications", volume), ("glance", "notifications", image),
            ("nova", "versioned_notifications", server),
            (cinder, "notifications", sample("cinder/volume.exists.json"))]


@pytest.mark.slow
def test_killed_api_down_connections_cut_and_still_every_event_once(
        cloud: Cloud, api_files: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, api_tokens, token = api_files
    with ServeProcess(url, tokens_file=api_tokens, log_path=tmp_path / "serve.log") as api, \
            collector(cloud, api.url, tmp_path, token) as c:
        c.start(bound=len(EXCHANGES))
        # The API is down: what is read waits in the buffer.
        cloud.publish([m for i in range(150) for m in stream(i)])
        wait_until(lambda: c.metric("tally_collector_received_total") == 600, "600 read while the API is down")
        assert c.metric("tally_collector_buffered_events") == 450
        wait_until(lambda: c.metric("tally_collector_send_failures_total", outcome="unavailable") > 0,
                   "the sender to find the API down")
        api.start()
        later = [m for i in range(150, 900) for m in stream(i)]
        publishing = threading.Thread(target=cloud.publish, args=(later,), daemon=True)
        publishing.start()
        wait_until(lambda: c.metric("tally_collector_received_total") >= 1000, "the stream flowing")
        assert c.kill() == -9  # mid-stream: its unacknowledged messages go back to the queue
        c.start(bound=len(EXCHANGES))
        wait_until(lambda: c.metric("tally_collector_received_total") >= 300, "the restarted collector reading")
        cloud.vhost.close_connections()  # every connection of the vhost: ours, ceilometer's, the notifiers'
        publishing.join(120)
        assert not publishing.is_alive()
        expected = cloud.expected_events()
        assert len(expected) == 900 * 3
        assert_stored_as_mapped(url, expected)
        wait_until(lambda: c.metric("tally_collector_broker_connected") == 1, "the collector reconnected")
        assert c.metric("tally_collector_broker_connection_failures_total") >= 1
        assert c.stop() == 0
    assert buffer_status(tmp_path / "buffer").buffered == 0
    assert cloud.heard() == cloud.published == 3600


@pytest.mark.slow
def test_sigterm_with_the_api_down_exits_0_by_the_deadline_and_keeps_the_buffer(
        cloud: Cloud, api_files: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, api_tokens, token = api_files
    with ServeProcess(url, tokens_file=api_tokens, log_path=tmp_path / "serve.log") as api:
        with collector(cloud, api.url, tmp_path, token, drain_timeout=1) as c:
            c.start(bound=len(EXCHANGES))
            cloud.publish([m for i in range(20) for m in stream(i)])
            wait_until(lambda: c.metric("tally_collector_buffered_events") == 60, "60 events buffered")
            # A bound for giving up, not a measurement: with the API down only the drain deadline (1 s) can
            # end the drain, so a collector that waited for the API would not exit within it.
            assert c.stop(timeout=120) == 0
            assert "stopped with 60 events buffered" in c.log_text()
        assert buffer_status(tmp_path / "buffer").buffered == 60
        api.start()
        with collector(cloud, api.url, tmp_path, token) as again:
            again.start(bound=len(EXCHANGES))
            assert_stored_as_mapped(url, cloud.expected_events())
            assert again.stop() == 0


@pytest.mark.slow
def test_no_password_or_token_reaches_the_log(vhost: VHost, tmp_path: Path) -> None:
    token = tmp_path / "collector.token"
    token.write_text("token-that-stays-secret-123\n")
    with CollectorProcess(cloud=CLOUD, transport_url=f"rabbit://guest@{vhost.amqp_url.split('@', 1)[1]}",
                          api_url="http://127.0.0.1:9", buffer_dir=tmp_path / "buffer", token_file=token,
                          env={"TALLY_COLLECTOR_TRANSPORT_PASSWORD": "wrong-pw-7f3a"},
                          extra_args=["--log-level", "debug"], log_path=tmp_path / "collector.log") as c:
        c.start()
        wait_until(lambda: (c.health() or {}).get("last_broker_error"), "the broker to refuse the login")
        health = c.health()
        assert health is not None and not health["broker_connected"] and "ACCESS_REFUSED" in health["last_broker_error"]
        assert c.metric("tally_collector_broker_connected") == 0
        assert c.stop() == 0
        log = c.log_text()
    assert "ACCESS_REFUSED" in log and "rabbit://guest@" in log
    assert "wrong-pw-7f3a" not in log and "token-that-stays-secret-123" not in log


def disk_used(path: Path) -> int:
    fs = os.statvfs(path)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


@pytest.mark.slow
def test_a_full_buffer_disk_says_so_and_drains_everything_once_the_api_is_back(
        cloud: Cloud, api_files: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, api_tokens, token = api_files
    reserve = CollectorSettings().buffer_reserve_bytes  # as shipped: 8 MiB
    with small_disk(16 * MiB) as disk, ServeProcess(url, tokens_file=api_tokens, log_path=tmp_path / "serve.log") as api:
        with collector(cloud, api.url, tmp_path, token, buffer_dir=disk / "buffer", drain_timeout=60) as c:
            c.start(bound=len(EXCHANGES))
            assert httpx.get(f"{c.url}/healthz").status_code == 200
            # The API is down: the buffer fills its disk, then refuses (the rest stays in the broker).
            chunks = 0
            while (c.health() or {}).get("buffer", "").startswith("writable"):
                assert chunks < 40, "16 MiB should have filled long before"
                cloud.publish([m for i in range(250 * chunks, 250 * (chunks + 1)) for m in stream(i)])
                chunks += 1
                wait_until(lambda: c.metric("tally_collector_buffer_blocked") == 1
                           or c.metric("tally_collector_received_total") == cloud.published, "the chunk read")
            health = httpx.get(f"{c.url}/healthz")
            assert health.status_code == 503 and health.json()["status"] == "failing"
            assert "not writable" in health.json()["buffer"] and "full" in health.json()["buffer"]
            assert httpx.get(f"{c.url}/livez").status_code == 200  # alive: a restart would not help
            wait_until(lambda: c.metric("tally_collector_buffer_blocked") == 1, "the buffer refusing a batch")
            assert c.metric("tally_collector_buffer_disk_full") == 1
            held = c.metric("tally_collector_buffered_events")
            per_event = disk_used(disk) / held
            cloud.publish([m for i in range(250 * chunks, 250 * (chunks + 1)) for m in stream(i)])  # the broker holds these
            expected = cloud.expected_events()
            started = time.monotonic()
            api.start()
            assert_stored_as_mapped(url, expected)
            drained = time.monotonic() - started
            wait_until(lambda: (c.health() or {}).get("status") == "ok", "/healthz ok again", 60)
            assert c.metric("tally_collector_buffer_disk_full") == 0
            assert (disk / "buffer" / "reserve").stat().st_size == reserve
            assert c.stop() == 0
            assert "the disk holding" in c.log_text()
    print(f"\nfull disk (16 MiB tmpfs, {reserve >> 20} MiB reserve): {int(held)} events held, {per_event:.0f} B of disk each; "
          f"{len(expected)} events stored {drained:.1f} s after the API came back")


def volumes(start: int, n: int) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for i in range(start, start + n):
        volume = sample("cinder/volume.create.end.json")
        volume["payload"]["volume_id"] = f"vol-{i}"
        out.append((EXCHANGE_OF["cinder"], "notifications", volume))
    return out


@pytest.mark.slow
def test_poison_of_a_mebibyte_each_cannot_starve_the_valid_messages_behind_it(
        cloud: Cloud, api_files: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, api_tokens, token = api_files
    with small_disk(16 * MiB) as disk, ServeProcess(url, tokens_file=api_tokens, log_path=tmp_path / "serve.log") as api:
        api.start()
        with collector(cloud, api.url, tmp_path, token, buffer_dir=disk / "buffer",
                       buffer_reserve_bytes=2 * MiB) as c:
            c.start(bound=len(EXCHANGES))
            before = disk_used(disk)
            poison = [os.urandom(MiB) for _ in range(25)]
            for body in poison:
                cloud.vhost.publish_raw("nova", "notifications.info", body)
            wait_until(lambda: c.metric("tally_collector_rejected_total", reason="unparseable") == 25, "25 rejected")
            per_poison = (disk_used(disk) - before) / 25
            cloud.publish(volumes(0, 200))
            expected = cloud.expected_events()
            assert len(expected) == 200
            assert_stored_as_mapped(url, expected)
            assert c.metric("tally_collector_buffer_disk_full") == 0
            assert c.stop() == 0
        rejected = buffer_status(disk / "buffer").rejected
        from tally_pipeline.collector.buffer import DiskBuffer

        buf = DiskBuffer(disk / "buffer", reserve_bytes=0)
        try:
            rows = buf.rejected()
        finally:
            buf.close()
    assert rejected == 25
    assert sorted(r.digest or "" for r in rows) == sorted(hashlib.sha256(b).hexdigest() for b in poison)
    assert {r.size for r in rows} == {MiB} and all(len(r.body) < 5000 for r in rows)
    assert per_poison < 64 * 1024  # was about 3.3 MB
    print(f"\n25 poison messages of 1 MiB: {per_poison:.0f} B of disk each; 200 valid stored")
