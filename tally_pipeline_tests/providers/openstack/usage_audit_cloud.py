"""A fake nova and a tally config pointing at it, for the usage audit's tests: tally's history is written
as collector events, the ledger posted by the real poster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.usage_audit import audit_usage

T1 = datetime(2026, 3, 1, tzinfo=UTC)
T2 = T1 + timedelta(days=1)
NOW = T2 + timedelta(hours=6)  # the posting cycle's clamp (NOW - 900 s) is past the window
SMALL = {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}
LARGE = {"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80}


def server(sid: str, project: str, size: dict[str, Any], launched: datetime, *, status: str = "ACTIVE",
           deleted: datetime | None = None) -> PlatformRecord:
    return PlatformRecord("instance", sid, project, dict(size), "DELETED" if deleted else status, None,
                          launched - timedelta(seconds=3), deleted or launched, deleted_at=deleted, name=sid,
                          launched_at=launched)


class Cloud:
    """A fake nova, a tally config pointing at it, and tally's history written as collector events."""

    def __init__(self, tmp_path: Path, records: list[PlatformRecord], deleted: list[PlatformRecord] = (),
                 audit: dict[str, Any] | None = None, meters: dict[str, Any] | None = None,
                 database: str | None = None):
        self.fake = FakeOpenStack(StaticView.of(records, list(deleted)), cloud="c1", at=NOW).start()
        config: dict[str, Any] = {"database": database or f"duckdb://{tmp_path / 'tally.duckdb'}",
                                  "clouds": {"c1": self.fake.tally_cloud_entry(timeout=30)},
                                  "audit": audit or {}}
        if meters:
            config["meters"] = meters
        self.config_path = tmp_path / "tally.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.rt = Runtime.load(str(self.config_path))
        self.rt.store.migrate()
        self._n = 0

    def event(self, sid: str, project: str, at: datetime, verb: str, size: dict[str, Any] | None = None,
              status: str | None = "active") -> None:
        self._n += 1
        types = {"create": "compute.instance.create.end", "update": "compute.instance.resize.confirm.end",
                 "delete": "compute.instance.delete.end", "power_off": "compute.instance.power_off.end"}
        payload: dict[str, Any] = {}
        if size is not None:
            payload["size"] = dict(size)
        if status is not None:
            payload["status"] = status
        outcome = self.rt.ingestor.ingest([{
            "event_id": f"e{self._n}", "event_type": types[verb], "cloud": "c1", "resource_type": "instance",
            "resource_id": sid, "project_id": project, "occurred_at": format_rfc3339(at), "payload": payload}],
            origin="test")
        assert outcome.stored == 1, outcome.as_json()

    def post(self, now: datetime = NOW) -> None:
        from tally_pipeline.services.projection import refresh

        refresh(self.rt.store)
        post_usage(self.rt.store, self.rt.registry, now=now, ingest_lag=900, window_days=35)

    def audit(self, start: datetime = T1, end: datetime = T2) -> Any:
        return audit_usage(self.rt.store, self.rt.registry, "c1", self.rt.adapter("c1"), start, end,
                           self.rt.config.audit, now=NOW)

    def tamper(self, project: str, meter: str, add: str) -> None:
        def work(uow):
            uow.execute("UPDATE ledger_postings SET amount = amount + CAST(%s AS DECIMAL(38,6)) WHERE cloud = 'c1' "
                        "AND project_id = %s AND meter = %s AND account = 'usage'", [add, project, meter])

        self.rt.store.run(work)

    def close(self) -> None:
        self.rt.close()
        self.fake.stop()


@pytest.fixture
def make(tmp_path):
    made: list[Cloud] = []

    def build(*args: Any, **kwargs: Any) -> Cloud:
        cloud = Cloud(tmp_path, *args, **kwargs)
        made.append(cloud)
        return cloud

    yield build
    for cloud in made:
        cloud.close()



def agreeing(make: Any, **kwargs: Any) -> Cloud:
    """Three servers in two projects, one deleted in the window; tally's history says what nova says."""
    a = server("srv-a", "p1", SMALL, T1 - timedelta(hours=5))
    b = server("srv-b", "p1", LARGE, T1 + timedelta(hours=3, minutes=10))
    c = server("srv-c", "p2", SMALL, T1 + timedelta(hours=1), deleted=T1 + timedelta(hours=7, seconds=30))
    cloud = make([a, b], [c], **kwargs)
    cloud.event("srv-a", "p1", a.launched_at, "create", SMALL)
    cloud.event("srv-b", "p1", b.launched_at, "create", LARGE)
    cloud.event("srv-c", "p2", c.launched_at, "create", SMALL)
    cloud.event("srv-c", "p2", c.deleted_at, "delete", status=None)
    cloud.post()
    return cloud
