"""`tally history`, `tally inventory` and `tally projection` through the real CLI."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline_tests.services.test_projection import T0, envelope


def seeded(tmp_path) -> str:
    url = f"duckdb://{tmp_path / 'q.duckdb'}"
    store = open_store(url)
    Ingestor(store, default_registry()).ingest([
        envelope("c1", "v1", "create", T0, "p1", 10),
        envelope("c2", "v1", "update", T0 + timedelta(hours=1), None, 20),
        envelope("c3", "v2", "create", T0, "p2", 5),
        envelope("c4", "v2", "delete", T0 + timedelta(hours=3), None, None),
    ], origin="t")
    store.close()
    return url


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_history_table_and_json(tmp_path) -> None:
    url = seeded(tmp_path)
    table = run("history", "c1", "volume", "v1", "--database", url)
    assert table.exit_code == 0
    assert "volume.resize.end" in table.output and "lifecycle:" in table.output
    data = json.loads(run("history", "c1", "volume", "v1", "--database", url, "--format", "json").output)
    assert [e["event_id"] for e in data["events"]] == ["c1", "c2"]
    assert [(i["start"], i["end"]) for i in data["intervals"]] == [
        ("2026-03-01T00:00:00Z", "2026-03-01T01:00:00Z"), ("2026-03-01T01:00:00Z", None)]
    missing = CliRunner().invoke(main, ["history", "c1", "volume", "nope", "--database", url])
    assert missing.exit_code != 0 and "no events for volume 'nope'" in missing.output


def test_inventory_formats_and_as_of(tmp_path) -> None:
    url = seeded(tmp_path)
    rows = list(csv.DictReader(io.StringIO(run("inventory", "--database", url, "--format", "csv").output)))
    assert [(r["resource_id"], r["size"]) for r in rows] == [("v1", '{"gb":20}')]
    past = json.loads(run("inventory", "--database", url, "--format", "json", "--as-of", "2026-03-01T02:00:00Z").output)
    assert sorted(r["resource_id"] for r in past) == ["v1", "v2"]
    assert "v1" in run("inventory", "--database", url, "--project", "p1").output
    bad = CliRunner().invoke(main, ["inventory", "--database", url, "--as-of", "2026-03-01"])
    assert bad.exit_code != 0 and "--as-of" in bad.output


def test_projection_rebuild_and_refresh(tmp_path) -> None:
    url = seeded(tmp_path)
    first = json.loads(run("projection", "refresh", "--database", url).output)
    assert first["resources"] == 2 and first["watermark"] == 4
    assert json.loads(run("projection", "refresh", "--database", url).output)["resources"] == 0
    rebuilt = json.loads(run("projection", "rebuild", "--database", url).output)
    assert rebuilt["full"] and rebuilt["resources"] == 2
