"""What every entry point needs, built once from the configuration: the store, the registry, the ingestor."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

from tally_pipeline.config import MisconfiguredCloud, TallyConfig, UnknownCloud, load_config
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.schemas import default_registry, load_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import Store, open_store

if TYPE_CHECKING:
    from tally_pipeline.providers.interface import PlatformAdapter
    from tally_pipeline.services.reconciliation import SyncRun


@dataclass
class Runtime:
    config: TallyConfig
    _store: Store | None = field(default=None, repr=False)
    _adapters: dict[str, PlatformAdapter] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, config_path: str | None = None, *, database: str | None = None,
             isolate_clouds: bool = False) -> Runtime:
        return cls(load_config(config_path, database=database, isolate_clouds=isolate_clouds))

    @cached_property
    def registry(self) -> SizeSchemaRegistry:
        base = default_registry() if self.config.schemas_dir is None else load_registry(self.config.schemas_dir)
        if not self.config.meters:
            return base  # the packaged one is compiled once per process
        return base.with_unbilled_statuses({name: m.unbilled_statuses for name, m in self.config.meters.items()})

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self.open_store()
        return self._store

    def open_store(self, *, migrate: bool | None = None) -> Store:
        """A new store on the configured database, with its connection settings (the caller closes it)."""
        return open_store(self.config.database, migrate=migrate, duckdb_threads=self.config.duckdb.threads)

    @cached_property
    def ingestor(self) -> Ingestor:
        return Ingestor(self.store, self.registry)

    def check_cloud(self, cloud: str) -> None:
        """Raise ``UnknownCloud`` unless ``cloud`` is configured (``MisconfiguredCloud``: named, but invalid)."""
        reason = self.config.misconfigured_clouds.get(cloud)
        if reason is not None:
            raise MisconfiguredCloud(f"cloud {cloud!r} is misconfigured: {reason}")
        if cloud not in self.config.clouds:
            known = ", ".join(sorted(self.config.clouds)) or "none configured"
            raise UnknownCloud(f"cloud {cloud!r} is not in the configuration's clouds ({known})")

    def adapter(self, cloud: str) -> PlatformAdapter:
        """The platform adapter for a configured cloud (built once per runtime)."""
        self.check_cloud(cloud)
        if cloud not in self._adapters:
            from tally_pipeline.providers import adapter_for

            self._adapters[cloud] = adapter_for(cloud, self.config.clouds[cloud])
        return self._adapters[cloud]

    def sync(self, cloud: str, *, now: datetime | None = None, run_key: str | None = None,
             run_id: str | None = None, adapter: PlatformAdapter | None = None) -> SyncRun:
        """One reconciliation run of a configured cloud with the configured settings, against ``adapter``
        (default: the cloud's own; the demo passes a simulated one). See
        ``tally_pipeline.services.reconciliation.run_sync``."""
        from tally_pipeline.services.reconciliation import run_sync

        return run_sync(self.store, self.ingestor, cloud, adapter if adapter is not None else self.adapter(cloud),
                        **self.config.reconciliation.run_options(), now=now, run_key=run_key, run_id=run_id)

    def close(self) -> None:
        for adapter in self._adapters.values():
            close = getattr(adapter, "close", None)
            if close is not None:
                close()
        self._adapters.clear()
        if self._store is not None:
            self._store.close()
            self._store = None
