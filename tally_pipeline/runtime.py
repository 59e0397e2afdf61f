"""What every entry point needs, built once from the configuration: the store, the registry, the ingestor."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tally_pipeline.config import TallyConfig, load_config
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.ingest import Ingestor
from tally_pipeline.schemas import load_registry
from tally_pipeline.store import Store, open_store


@dataclass
class Runtime:
    config: TallyConfig
    _store: Store | None = field(default=None, repr=False)

    @classmethod
    def load(cls, config_path: str | None = None, *, database: str | None = None) -> Runtime:
        return cls(load_config(config_path, database=database))

    @cached_property
    def registry(self) -> SizeSchemaRegistry:
        return load_registry(self.config.schemas_dir)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.config.database)
        return self._store

    @cached_property
    def ingestor(self) -> Ingestor:
        return Ingestor(self.store, self.registry)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
