"""The Dagster code location: everything under tally_pipeline/defs, with its resources."""

from __future__ import annotations

import dagster as dg

from tally_pipeline.defs import events
from tally_pipeline.defs.resources import TallyStore

defs = dg.Definitions(
    assets=dg.load_assets_from_modules([events]),
    resources={
        "tally": TallyStore(
            config_path=dg.EnvVar("TALLY_CONFIG").get_value(),
            database=dg.EnvVar("TALLY_DATABASE").get_value(),
        ),
    },
)
