"""`tally sync` against the fake OpenStack from a test: a config file, the command, what it stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store

CREATE_EVENT = {"instance": "compute.instance.create.end", "volume": "volume.create.end",
                "floating_ip": "floatingip.create.end", "image": "image.activate",
                "load_balancer": "octavia.loadbalancer.create.end"}


def write_config(tmp_path: Path, fake: FakeOpenStack, *, cloud: str, database: str, user: str = "admin",
                 cloud_options: dict[str, Any] | None = None, **reconciliation: Any) -> Path:
    """A tally config naming the fake as ``cloud`` (short timeouts, no retries unless asked)."""
    entry = fake.tally_cloud_entry(user, **{"timeout": 5, "retries": 0, "retry_delay": 0.01, "page_size": 2,
                                            **(cloud_options or {})})
    path = tmp_path / f"tally-{user}.yaml"
    path.write_text(yaml.safe_dump({
        "database": database,
        "clouds": {cloud: entry},
        "reconciliation": {"settle_window": 300, "mass_delete_guard": 0.5, **reconciliation},
    }))
    return path


def tally_sync(config: Path, cloud: str, *, at, run_key: str) -> tuple[int, dict[str, Any], str]:
    """``tally sync CLOUD --json``: exit code, the run as JSON (empty when none printed), the output."""
    stamp = format_rfc3339(at)
    result = CliRunner().invoke(main, ["sync", cloud, "--config", str(config), "--at", stamp, "--run-key", run_key,
                                       "--json"])
    out = result.output
    run = orjson.loads(out[out.index("{"):]) if "{" in out else {}
    return result.exit_code, run, out


def known(database: str, cloud: str, *records: PlatformRecord, at) -> None:
    """The projection knows these resources live: their collector creates arrived at ``at``, with the
    status the platform shows now (lower-cased, as the collector maps it)."""
    events = [{"event_id": f"c-{r.resource_id}", "event_type": CREATE_EVENT[r.resource_type], "cloud": cloud,
               "resource_type": r.resource_type, "resource_id": r.resource_id, "project_id": r.project_id,
               "occurred_at": at.isoformat(), "payload": {"size": r.size, "status": r.status.lower()}}
              for r in records]
    ingest(database, events)


def ingest(database: str, events: list[dict[str, Any]]) -> None:
    """Store ``events`` as the collector does; every one of them must be new."""
    store = open_store(database)
    try:
        outcome = Ingestor(store, default_registry()).ingest(events, origin="collector")
        assert outcome.stored == len(events), outcome
    finally:
        store.close()


def query(database: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    store = open_store(database)
    try:
        return store.query(sql, params or [])
    finally:
        store.close()
