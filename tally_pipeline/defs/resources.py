"""One resource per external system: the tally database, the ledger, the clouds' platforms, the clock.

Production builds them from the tally config file (``TALLY_CONFIG``) and env vars; tests and the
demo pass other objects with the same methods (a simulated platform, a simulated clock).
"""


from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

import dagster as dg
from pydantic import Field, PrivateAttr

from tally_pipeline.config import TallyConfig
from tally_pipeline.runtime import Runtime


class TallyStore(dg.ConfigurableResource):
    """The tally database: events, dead letter, projections, reconciliation runs, usage, ledger."""

    config_path: str | None = Field(default=None, description="tally config file (YAML)")
    database: str | None = Field(default=None, description="database URL; overrides the config file's")

    _runtime: Runtime | None = PrivateAttr(default=None)
    _session: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # A step is one unit of work for the database: an embedded DuckDB file stays open for the
        # step (other processes wait for it) instead of being reopened by every statement group.
        self._runtime = Runtime.load(self.config_path, database=self.database)
        self._session = self._runtime.store.session()
        self._session.__enter__()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:  # used outside a run (a sensor, a schedule): open on demand
            self._runtime = Runtime.load(self.config_path, database=self.database)
        return self._runtime

    @property
    def config(self) -> TallyConfig:
        return self.runtime.config

    @contextmanager
    def session(self) -> Iterator[Runtime]:
        """The runtime with its store held open for a burst of work (DuckDB: one open file)."""
        rt = self.runtime
        with rt.store.session():
            yield rt


class Ledger(dg.ConfigurableResource):
    """Where usage is posted: the ledger tables (by default in the tally database itself)."""

    store: TallyStore
    database: str | None = Field(default=None, description="a separate ledger database URL, if any")

    _runtime: Runtime | None = PrivateAttr(default=None)

    @property
    def runtime(self) -> Runtime:
        if self.database is None:
            return self.store.runtime
        if self._runtime is None:
            self._runtime = Runtime.load(self.store.config_path, database=self.database)
        return self._runtime

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def post(self, now: datetime) -> Any:
        from tally_pipeline.ledger.poster import post_usage

        rt = self.runtime
        settings = rt.config.ledger
        return post_usage(rt.store, rt.registry, now=now, ingest_lag=settings.ingest_lag, window_days=settings.window_days)

    def verify(self) -> Any:
        from tally_pipeline.ledger.verify import verify

        rt = self.runtime
        return verify(rt.store, rt.registry)


class AdapterSource(Protocol):
    """Gives the platform adapter of a cloud."""

    def adapter(self, cloud: str) -> Any: ...


class PlatformAdapters(dg.ConfigurableResource):
    """Each configured cloud's platform adapter (openstacksdk, simulated, …), from the config file."""

    config_path: str | None = Field(default=None, description="tally config file (YAML)")

    _runtime: Runtime | None = PrivateAttr(default=None)

    def adapter(self, cloud: str) -> Any:
        if self._runtime is None:
            self._runtime = Runtime.load(self.config_path)
        return self._runtime.adapter(cloud)


class Clock(Protocol):
    def now(self) -> datetime: ...


class WallClock(dg.ConfigurableResource):
    """The real time. The demo swaps in a simulated clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)
