"""`tally db migrate`, `tally ingest` and `tally serve` refusing unsafe binds — through the real CLI."""

from __future__ import annotations

import gzip
import json

from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.store import open_store
from tally_pipeline_tests.events import event


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_db_migrate_on_postgres_is_idempotent(pg_url) -> None:
    first = run("db", "migrate", "--database", pg_url)
    assert first.exit_code == 0 and "applied 0001_events.sql" in first.output
    again = run("db", "migrate", "--database", pg_url)
    assert again.exit_code == 0 and "0 new" in again.output


def test_ingest_jsonl_gzip_and_document_files(tmp_path) -> None:
    url = f"duckdb://{tmp_path / 'db.duckdb'}"
    events = [event() for _ in range(2500)]
    lines = tmp_path / "a.jsonl"
    lines.write_text("\n".join(json.dumps(e) for e in events[:1500]) + "\nnot json at all\n")
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress("\n".join(json.dumps(e) for e in events[1000:]).encode()))
    document = tmp_path / "c.json"
    document.write_text(json.dumps({"events": events[2400:] + [{"bad": True}]}))
    result = run("ingest", "--database", url, "--json", str(lines), str(packed), str(document))
    assert result.exit_code == 0, result.output
    files = json.loads(result.output)["files"]
    assert [(f["items"], f["stored"], f["duplicates"], f["rejected"]) for f in files] == [
        (1501, 1500, 0, 1), (1500, 1000, 500, 0), (101, 0, 100, 1)]
    assert files[0]["reasons"] == {"invalid_json": 1} and files[2]["reasons"] == {"unknown_field": 1}
    store = open_store(url)
    assert store.event_count() == 2500
    dead = store.rejected()
    assert {d.origin for d in dead} == {"file:a.jsonl", "file:c.json"}
    assert any(d.raw == "not json at all" for d in dead)


def test_ingest_reports_a_truncated_document_and_keeps_what_was_read(tmp_path) -> None:
    url = f"duckdb://{tmp_path / 'db.duckdb'}"
    document = tmp_path / "cut.json"
    document.write_text(json.dumps({"events": [event() for _ in range(1200)]})[:-500])
    result = run("ingest", "--database", url, str(document))
    assert result.exit_code == 1
    assert "stopped" in result.output and "cut.json" in result.output
    assert 1000 <= open_store(url).event_count() < 1200


def test_bad_config_is_one_clear_line(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text("databse: x\n")
    result = CliRunner().invoke(main, ["ingest", "--config", str(config), str(config)])
    assert result.exit_code != 0
    assert "databse: unknown key" in result.output


def test_serve_refuses_public_bind_without_tokens(tmp_path) -> None:
    result = CliRunner().invoke(main, ["serve", "--database", f"duckdb://{tmp_path / 'x.duckdb'}", "--host", "0.0.0.0"])
    assert result.exit_code != 0 and "refusing to listen on 0.0.0.0" in result.output


def test_serve_refuses_an_unmigrated_postgres(pg_url) -> None:
    result = CliRunner().invoke(main, ["serve", "--database", pg_url, "--port", "0"])
    assert result.exit_code != 0 and "tally db migrate" in result.output
