"""``tally bench collect`` at a toy size, against the machine's RabbitMQ and a Postgres database of its own:
its figures agree with what the run stored, and it says when earlier runs' events were already there.
(Speed is never asserted; the figures are reported.)"""

from __future__ import annotations

import json

from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.store import open_store


def _bench_collect(pg_url: str, transport_url: str, *options: str) -> tuple[dict, str]:
    result = CliRunner().invoke(main, ["bench", "collect", "--messages", "100", "--no-oslo", "--database", pg_url,
                                       "--transport-url", transport_url, *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_the_collect_bench_stores_every_mapped_event_and_says_what_the_database_held(pg_url, vhost) -> None:
    with open_store(pg_url, migrate=True):
        pass
    first, first_notes = _bench_collect(pg_url, vhost.transport_url())
    e2e = first["end_to_end"]
    # one in ten of the mix changes no usage: the rest is stored, every message read
    assert first["mapped"] == 90 and e2e["events_stored"] == 90 and e2e["collector"]["received"] == 100
    assert e2e["collector"]["sent"] == {"stored": 90, "duplicate": 0, "rejected": 0}
    assert e2e["collector"]["processes"] == 1 and e2e["collector"]["received_per_process"] == [100]
    assert e2e["events_in_database_before"] == 0 and "note:" not in first_notes
    assert e2e["ratio_to_baseline"] == round(e2e["notifications_per_second"]
                                             / first["baseline_kombu_consume_ack"]["per_second"], 3)

    second, second_notes = _bench_collect(pg_url, vhost.transport_url())
    assert second["end_to_end"]["events_in_database_before"] == 90
    assert "the database held 90 events before this run" in second_notes
    with open_store(pg_url) as store:
        # each run under a cloud of its own
        assert store.query("SELECT count(DISTINCT cloud), count(*) FROM events") == [(2, 180)]


def test_collectors_sharing_the_queues_and_the_buffer_read_each_message_once_and_store_every_event(
        pg_url, vhost) -> None:
    with open_store(pg_url, migrate=True):
        pass
    report, _ = _bench_collect(pg_url, vhost.transport_url(), "--collectors", "2")
    collector = report["end_to_end"]["collector"]
    assert collector["processes"] == 2 and len(collector["received_per_process"]) == 2
    assert 0 <= collector["connected_within_s"] < 60  # the clock starts at the first one's connection
    # RabbitMQ hands each message to one of them (how many to each is the broker's choice)
    assert sum(collector["received_per_process"]) == collector["received"] == 100
    # one buffer, two senders: each event posted once, none lost
    assert collector["sent"] == {"stored": 90, "duplicate": 0, "rejected": 0} and collector["exit_status"] == 0
    with open_store(pg_url) as store:
        assert store.query("SELECT count(*), count(DISTINCT event_id) FROM events") == [(90, 90)]
