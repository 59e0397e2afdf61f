"""One ConfigurableResource per external system, configured from the tally config file or env vars."""

from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator

import dagster as dg
from pydantic import Field

from tally_pipeline.runtime import Runtime


class TallyStore(dg.ConfigurableResource):
    """The tally database (events, projections, reconciliation, ledger), opened per unit of work."""

    config_path: str | None = Field(default=None, description="tally config file (default: $TALLY_CONFIG)")
    database: str | None = Field(default=None, description="database URL; overrides the config file's")

    @contextmanager
    def runtime(self) -> Iterator[Runtime]:
        rt = Runtime.load(self.config_path, database=self.database)
        try:
            yield rt
        finally:
            rt.close()
