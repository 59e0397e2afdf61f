"""`tally post-usage` and `tally ledger verify` fold pending events first, through the README's commands:
an operator who runs `tally ingest` and then the poster alone (cron, a CronJob) gets the usage posted,
and a poster that cannot fold fails instead of posting from a stale projection."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.store import open_store
from tally_pipeline_tests.events import event

NOW = "2026-03-03T00:00:00Z"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _day_of_events(tmp_path: Path) -> Path:
    """One instance live for 24 hours and one volume live for 12, as a landing file (JSON lines)."""
    events = [
        event(event_id="vm-create", resource_id="vm-1", occurred_at="2026-03-01T00:00:00Z"),
        event(event_id="vm-delete", resource_id="vm-1", event_type="compute.instance.delete.end",
              occurred_at="2026-03-02T00:00:00Z", payload={}),
        event(event_id="vol-create", resource_type="volume", resource_id="vol-1", event_type="volume.create.end",
              occurred_at="2026-03-01T06:00:00Z", payload={"size": {"gb": 10, "volume_type": "ssd"}}),
        event(event_id="vol-delete", resource_type="volume", resource_id="vol-1", event_type="volume.delete.end",
              occurred_at="2026-03-01T18:00:00Z", payload={}),
    ]
    path = tmp_path / "2026-03-01.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return path


@pytest.fixture
def ingested(tmp_path: Path, store_url: str) -> str:
    """A config file over a database holding the ingested day, nothing folded yet."""
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nledger: {{ingest_lag: 900, window_days: 35}}\n")
    if store_url.startswith("postgresql"):
        assert run("db", "migrate", "--config", str(config)).exit_code == 0
    ingest = run("ingest", "--config", str(config), str(_day_of_events(tmp_path)))
    assert ingest.exit_code == 0, ingest.output
    return str(config)


def _ledger(store_url: str) -> dict[tuple[str, str], str]:
    store = open_store(store_url)
    try:
        rows = store.query("SELECT project_id, meter, sum(amount) FROM ledger_postings GROUP BY 1, 2")
    finally:
        store.close()
    return {(project, meter): f"{amount:.6f}" for project, meter, amount in rows}


def test_post_usage_right_after_an_ingest_posts_the_ingested_usage(ingested: str, store_url: str) -> None:
    posted = run("post-usage", "--config", ingested, "--now", NOW)
    assert posted.exit_code == 0, posted.output
    out = json.loads(posted.output)
    assert out["folded"]["events"] == 4 and out["folded"]["resources"] == 2
    assert out["totals"]["usage"]["instance_hours"] == "24.000000"
    assert out["totals"]["usage"]["volume_gb_hours"] == "120.000000"  # 10 GB for 12 hours
    ledger = _ledger(store_url)
    assert ledger[("proj-a", "instance_hours")] == "24.000000"
    assert ledger[("proj-a", "vcpu_hours")] == "48.000000"
    assert ledger[("proj-a", "volume_gb_hours")] == "120.000000"

    again = json.loads(run("post-usage", "--config", ingested, "--now", NOW).output)
    assert again["folded"]["events"] == 0 and again["posted"] == 0  # nothing pending, nothing new
    verified = run("ledger", "verify", "--config", ingested)
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.output)["entities"] == len(ledger)


def test_ledger_verify_right_after_an_ingest_sees_the_new_entities(ingested: str) -> None:
    verified = run("ledger", "verify", "--config", ingested)
    report = json.loads(verified.output)
    assert report["folded"]["events"] == 4
    never = {(d["project_id"], d["meter"]) for d in report["discrepancies"] if d["kind"] == "never_posted"}
    assert {("proj-a", "instance_hours"), ("proj-a", "vcpu_hours"), ("proj-a", "volume_gb_hours")} <= never
    assert verified.exit_code == 1 and report["ok"] is False


@pytest.mark.postgres
def test_a_poster_that_cannot_fold_fails_and_posts_nothing(tmp_path: Path, pg_url: str, pg_databases) -> None:
    """A poster whose database role may write the ledger but not the projection: the fold fails, so
    the command fails, names why, and posts nothing (before, it posted 0 entities and exited 0)."""
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {pg_url}\n")
    assert run("db", "migrate", "--config", str(config)).exit_code == 0
    assert run("ingest", "--config", str(config), str(_day_of_events(tmp_path))).exit_code == 0
    role = f"poster_{os.getpid()}_{tmp_path.name[-8:].replace('-', '_')}".lower()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        conn.execute(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON current_resources, resource_intervals, "
                     f"projection_state FROM {role}")
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    poster_url = f"postgresql://{role}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{info['dbname']}"
    try:
        for command, doing in ((["post-usage", "--now", NOW], "posted"), (["ledger", "verify"], "verified")):
            result = CliRunner().invoke(main, [*command, "--database", poster_url])
            assert result.exit_code == 1, result.output
            assert f"cannot fold the pending events into the projection, so nothing was {doing}" in result.output
            assert "permission denied" in result.output
        assert _ledger(pg_url) == {}
        assert open_store(pg_url).query("SELECT count(*) FROM ledger_cycles") == [(0,)]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
