"""``tally collector status|drain|rejected|requeue`` on a real buffer and a contract API over a socket."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.collector import Collector
from tally_pipeline_tests.collector_api import TOKEN, ContractAPI, Forced, LoopbackServer, volume_event


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_status_drain_rejected_and_requeue(tmp_path):
    api = ContractAPI()
    with LoopbackServer(api.app) as srv:
        srv.start()
        with Collector(srv.url, TOKEN, tmp_path, clock=lambda: 1_700_000_000.0) as c:
            c.submit_many(volume_event(i) for i in range(5))
            c.submit(volume_event(5, payload={"size": {"gb": "ten"}}))
            c.submit(volume_event(6, resource_type="spaceship"))
            c.submit(volume_event(7, resource_type="spaceship"))

        code, out = run("collector", "status", "--buffer-dir", str(tmp_path), "--json")
        assert code == 0
        before = json.loads(out)
        assert before["buffered"] == 8 and before["rejected"] == 0 and before["oldest_age_seconds"] > 0

        api.script.append(Forced(503, {"error": "database_unavailable"}))
        code, out = run("collector", "drain", "--buffer-dir", str(tmp_path), "--url", srv.url, "--token", TOKEN)
        assert code == 1 and "8 events remain buffered" in out and "503" in out

        code, out = run("collector", "status", "--buffer-dir", str(tmp_path))
        assert code == 0
        assert "8 events" in out and "HTTP 503" in out and "failing" in out

        code, out = run("collector", "drain", "--buffer-dir", str(tmp_path), "--url", srv.url, "--token", TOKEN,
                        "--json")
        assert code == 0
        drained = json.loads(out)
        assert (drained["stored"], drained["rejected"], drained["remaining"]) == (5, 3, 0)

        code, out = run("collector", "status", "--buffer-dir", str(tmp_path), "--json")
        after = json.loads(out)
        assert after["buffered"] == 0 and after["rejected"] == 3
        assert after["top_reasons"] == [{"reason": "unknown_resource_type", "count": 2},
                                        {"reason": "size_schema", "count": 1}]
        assert after["sender"]["consecutive_failures"] == "0"
        code, out = run("collector", "status", "--buffer-dir", str(tmp_path))
        assert "rejected" in out and "unknown_resource_type 2, size_schema 1" in out and "failing" not in out

        code, out = run("collector", "rejected", "--buffer-dir", str(tmp_path), "--reason", "size_schema", "--json")
        (entry,) = json.loads(out)
        assert entry["event_id"] == "ev-000005" and entry["event"] == volume_event(5, payload={"size": {"gb": "ten"}})

        code, out = run("collector", "requeue", "--buffer-dir", str(tmp_path), "--reason", "unknown_resource_type")
        assert code == 0 and "requeued 2 events" in out
        status = json.loads(run("collector", "status", "--buffer-dir", str(tmp_path), "--json")[1])
        assert status["buffered"] == 2 and status["rejected"] == 1


def test_drain_with_a_bad_token_says_so_and_keeps_the_events(tmp_path, server):
    with Collector(server.url, TOKEN, tmp_path) as c:
        c.submit(volume_event(1))
    code, out = run("collector", "drain", "--buffer-dir", str(tmp_path), "--url", server.url, "--token", "nope")
    assert code == 1 and "refused the collector's token" in out and "1 events stay buffered" in out
    assert json.loads(run("collector", "status", "--buffer-dir", str(tmp_path), "--json")[1])["buffered"] == 1


def test_status_of_a_missing_buffer_is_a_clear_error(tmp_path):
    code, out = run("collector", "status", "--buffer-dir", str(tmp_path / "nope"))
    assert code == 1 and "no collector buffer" in out
    assert not (tmp_path / "nope").exists()
