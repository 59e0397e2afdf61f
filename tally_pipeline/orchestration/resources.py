"""One resource per external system: the tally database, the ledger, the clouds' platforms, the clock.

Each resource is a client built from its own config: it names a config file and database (in
production ``dg.EnvVar`` settings, resolved where the run or sensor executes), builds its Runtime from
them when a step or a sensor tick sets it up, and closes it when that ends — so every tick and every
run reads the config file as it is then, and nothing outlives its use. Called outside an execution (a
test, the demo), a resource builds its Runtime on first use and keeps it until ``close()``. Tests and
the demo pass other objects with the same methods (a simulated platform, a simulated clock).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import dagster as dg
from pydantic import Field, PrivateAttr

from tally_pipeline.config import CONFIG_ENV, TallyConfig
from tally_pipeline.core.alerts import Condition, UnrecordedFailure
from tally_pipeline.orchestration.failures import UNREADABLE
from tally_pipeline.orchestration.location import DATABASE_ENV, env_setting
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import alerts, projection
from tally_pipeline.services.dead_letter import PurgeResult, purge_dead_letter
from tally_pipeline.services.landing import FileSummary, ingest_file
from tally_pipeline.store import asset_reads
from tally_pipeline.store.base import RejectedEntry

if TYPE_CHECKING:
    from tally_pipeline.providers.interface import PlatformAdapter
    from tally_pipeline.services.ledger.daily import DailyResult
    from tally_pipeline.services.ledger.poster import CycleResult
    from tally_pipeline.services.ledger.verify import Verification
    from tally_pipeline.services.reconciliation import SyncRun
    from tally_pipeline.services.statements import MonthOutcome
    from tally_pipeline.services.usage_audit import AuditRun
    from tally_pipeline.store.snapshot import Snapshot


class _RuntimeClient(dg.ConfigurableResource["_RuntimeClient"]):
    """A resource whose client is a Runtime built from its config file (and database)."""

    config_path: str | None = Field(default=None, description="tally config file (YAML); default $TALLY_CONFIG")

    _runtime: Runtime | None = PrivateAttr(default=None)
    _unusable: Exception | None = PrivateAttr(default=None)

    def _database(self) -> str | None:
        return None

    def _load(self) -> Runtime:
        # isolate_clouds: one cloud's bad entry fails only that cloud's syncs (docs/operations.md)
        return Runtime.load(self.config_path, database=self._database(), isolate_clouds=True)

    def _rt(self) -> Runtime:
        if self._unusable is not None:
            raise self._unusable
        if self._runtime is None:
            self._runtime = self._load()
        return self._runtime

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # This step's or tick's own, from the config file as it is now. A config or database that fails
        # here is raised at the first use instead: there the body reports it cause first (a run's
        # failure, a check failed, a sensor's tick), where a resource's init error would lead with
        # Dagster's wrapper.
        try:
            self._runtime = self._load()
        except UNREADABLE as exc:
            self._unusable = exc

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()

    def close(self) -> None:
        self._unusable = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None


class StoreReads(Protocol):
    """The read model the assets' metadata, the checks and the sensors use: counts and states, no writes.
    ``TallyStore`` provides it; a test may pass anything with these methods."""

    def event_count(self) -> int: ...
    def rejected_count(self) -> int: ...
    def newest_rejected(self, limit: int) -> list[RejectedEntry]: ...
    def rejected_by_reason(self) -> list[tuple[str, int]]: ...
    def cloud_activity(self) -> list[tuple[str, int, int, datetime | None]]: ...
    def resource_statuses(self) -> dict[str, int]: ...
    def interval_counts(self) -> tuple[int, int]: ...
    def projection_watermark(self) -> int: ...
    def live_by_cloud_and_type(self) -> list[tuple[str, str, int]]: ...
    def clouds_ever_synced(self) -> set[str]: ...
    def alert_conditions(self, now: datetime, unrecorded: Sequence[UnrecordedFailure] = ()) -> dict[str, Condition]: ...
    @property
    def config(self) -> TallyConfig: ...


class TallyStore(_RuntimeClient):
    """The tally database (events, dead letter, projections, reconciliation runs, usage) and the operations
    the assets run on it. A step (or a sensor tick) holds it open throughout: an embedded DuckDB file
    stays open for the step (other processes wait for it) instead of being reopened by every statement group."""

    database: str | None = Field(default=None, description="database URL; overrides the config file's")

    _held: ExitStack | None = PrivateAttr(default=None)

    def _database(self) -> str | None:
        return self.database

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        super().setup_for_execution(context)
        self._held = ExitStack()
        if self._unusable is None:
            try:
                self._held.enter_context(self._rt().store.session())
            except UNREADABLE as exc:  # an embedded file another process holds past the retry budget
                self._unusable = exc

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
        super().teardown_after_execution(context)

    @contextmanager
    def session(self) -> Iterator[None]:
        """Hold the database open for a burst of work outside a step (DuckDB: one open file)."""
        with self._rt().store.session():
            yield

    @property
    def config(self) -> TallyConfig:
        return self._rt().config

    # -- writes

    def ingest_file(self, path: Path) -> FileSummary:
        """One landing file through the ingest core."""
        rt = self._rt()
        return ingest_file(rt.ingestor, path, limits=rt.config.landing.limits())

    def refresh_projection(self) -> projection.RefreshResult:
        """Fold the events stored since the last refresh into the projection tables."""
        return projection.refresh(self._rt().store)

    def sync(self, cloud: str, adapter: PlatformAdapter, *, now: datetime, run_key: str,
             run_id: str | None = None) -> SyncRun:
        """One reconciliation run of ``cloud`` against its platform ``adapter``, with the configured settings
        (``run_id``: a run the API reserved and asked Dagster to execute)."""
        from tally_pipeline.store.sync_runs import run_row

        rt = self._rt()
        if run_id is not None and (run_row(rt.store, run_id) or {}).get("status") != "running":
            run_id = None  # a re-execution of a finished run (its tags copied): a sync of its own, not a rewrite
        return rt.sync(cloud, now=now, run_key=run_key, run_id=run_id, adapter=adapter)

    def recompute_usage_daily(self, first: date, last: date, *, through: datetime) -> DailyResult:
        from tally_pipeline.services.ledger.daily import recompute_usage_daily

        rt = self._rt()
        return recompute_usage_daily(rt.store, rt.registry, first, last, through=through)

    def purge_dead_letter(self, now: datetime) -> PurgeResult:
        """Delete the dead-letter rows past ``dead_letter.retention_days``."""
        rt = self._rt()
        return purge_dead_letter(rt.store, rt.config.dead_letter.retention_days, now)

    def write_analyst_snapshot(self) -> Snapshot | None:
        """The Parquet snapshot for analysts, when the store is DuckDB and snapshots are on (else None)."""
        from tally_pipeline.store.snapshot import takes_snapshots, write_snapshot

        rt = self._rt()
        settings = rt.config.analytics
        if not settings.snapshots or not takes_snapshots(rt.store):
            return None
        return write_snapshot(rt.store, settings.snapshot_dir)

    def analyst_snapshot_dir(self) -> tuple[Path, datetime | None] | None:
        """Where the analyst snapshot is kept and when it was taken (None: snapshots off, or not DuckDB)."""
        from tally_pipeline.store.snapshot import default_snapshot_dir, snapshot_written_at, takes_snapshots

        rt = self._rt()
        settings = rt.config.analytics
        if not settings.snapshots or not takes_snapshots(rt.store):
            return None
        directory = settings.snapshot_dir or default_snapshot_dir(rt.store)
        return directory, snapshot_written_at(directory)

    # -- reads

    def alert_conditions(self, now: datetime, unrecorded: Sequence[UnrecordedFailure] = ()) -> dict[str, Condition]:
        """Every alert's condition over the configured clouds at ``now`` (``unrecorded``: sync runs that
        failed without recording their sync)."""
        rt = self._rt()
        return alerts.evaluate(rt.store, sorted(rt.config.clouds), now, rt.config.alerts.rules(),
                               rt.config.misconfigured_clouds, rt.config.alerts.clouds, unrecorded)

    def event_count(self) -> int:
        return self._rt().store.event_count()

    def rejected_count(self) -> int:
        return asset_reads.rejected_count(self._rt().store)

    def newest_rejected(self, limit: int) -> list[RejectedEntry]:
        return self._rt().store.rejected(limit=limit)

    def rejected_by_reason(self) -> list[tuple[str, int]]:
        return asset_reads.rejected_by_reason(self._rt().store)

    def cloud_activity(self) -> list[tuple[str, int, int, datetime | None]]:
        """Per cloud: collector events, reconciliation events, the last collector event."""
        return asset_reads.cloud_activity(self._rt().store)

    def resource_statuses(self) -> dict[str, int]:
        return asset_reads.resource_statuses(self._rt().store)

    def interval_counts(self) -> tuple[int, int]:
        """All intervals, open intervals."""
        return asset_reads.interval_counts(self._rt().store)

    def projection_watermark(self) -> int:
        return asset_reads.projection_watermark(self._rt().store)

    def live_by_cloud_and_type(self) -> list[tuple[str, str, int]]:
        return asset_reads.live_by_cloud_and_type(self._rt().store)

    def clouds_ever_synced(self) -> set[str]:
        return asset_reads.clouds_ever_synced(self._rt().store)

    def due_follow_ups(self, now: datetime) -> list[tuple[str, datetime]]:
        """Clouds whose latest run deferred something due by ``now``, with when it became due."""
        return asset_reads.due_follow_ups(self._rt().store, now)

    def usage_totals_by_day(self, first: date, last: date) -> dict[date, dict[str, Any]]:
        return asset_reads.usage_totals_by_day(self._rt().store, first, last)


class Ledger(TallyStore):
    """Where usage is posted: the ledger tables (by default in the tally database itself)."""

    ledger_database: str | None = Field(default=None, description="a separate ledger database URL, if any")

    def _database(self) -> str | None:
        return self.ledger_database or self.database

    def post(self, now: datetime) -> CycleResult:
        from tally_pipeline.services.ledger.poster import post_usage

        rt = self._rt()
        settings = rt.config.ledger
        return post_usage(rt.store, rt.registry, now=now, ingest_lag=settings.ingest_lag, window_days=settings.window_days)

    def verify(self) -> Verification:
        from tally_pipeline.services.ledger.verify import verify

        rt = self._rt()
        return verify(rt.store, rt.registry)

    def statement_clouds(self) -> list[str]:
        """The clouds a month is stated for: those with usage or a ledger."""
        from tally_pipeline.services.statements import clouds_to_state

        return clouds_to_state(self._rt().store)

    def close_month(self, cloud: str, month: date, now: datetime) -> MonthOutcome:
        """State (or re-state) ``month`` of ``cloud`` if it is closed at ``now``; else say why it waits."""
        from tally_pipeline.services.statements import close_month

        rt = self._rt()
        return close_month(rt.store, rt.registry, cloud=cloud, month=month, now=now,
                           ingest_lag=rt.config.ledger.ingest_lag)

    def audit_usage(self, cloud: str, adapter: PlatformAdapter, start: datetime, end: datetime, *,
                    now: datetime) -> AuditRun:
        """The usage audit of ``cloud`` over ``[start, end)`` against its platform's own usage, kept in
        ``usage_audits`` (``services/usage_audit.py``)."""
        from tally_pipeline.services.usage_audit import audit_usage

        rt = self._rt()
        return audit_usage(rt.store, rt.registry, cloud, adapter, start, end, rt.config.audit, now=now)


class AdapterSource(Protocol):
    """Gives the platform adapter of a cloud."""

    def adapter(self, cloud: str) -> PlatformAdapter: ...


class PlatformAdapters(_RuntimeClient):
    """Each configured cloud's platform adapter (openstacksdk, simulated, …), from the config file; the
    adapters' connections close with the step."""

    def adapter(self, cloud: str) -> PlatformAdapter:
        return self._rt().adapter(cloud)


class Clock(Protocol):
    def now(self) -> datetime: ...


class WallClock(dg.ConfigurableResource["WallClock"]):
    """The real time. The demo swaps in a simulated clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def default_resources(config_path: str | None = None, database: str | None = None) -> dict[str, Any]:
    """The production resources for a config file (None: ``$TALLY_CONFIG``), ``database`` overriding its own."""
    return {
        "store": TallyStore(config_path=config_path, database=database),
        "ledger": Ledger(config_path=config_path, database=database),
        "adapters": PlatformAdapters(config_path=config_path),
        "clock": WallClock(),
    }


def _from_environment(name: str) -> dg.EnvVar | None:
    # An unset EnvVar fails every run that needs the resource; unset here means "not given": the
    # config file's database, or the default config.
    return dg.EnvVar(name) if env_setting(name) else None


def environment_resources() -> dict[str, Any]:
    """The production resources as deployed: ``$TALLY_CONFIG`` and ``$TALLY_DATABASE`` are read where each
    run, sensor tick or check executes (the UI shows them as environment variables)."""
    return default_resources(_from_environment(CONFIG_ENV), _from_environment(DATABASE_ENV))
