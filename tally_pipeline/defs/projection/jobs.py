"""The job that re-folds the projections: what api_writes_sensor starts after API writes (and anyone, by hand)."""

import dagster as dg

from tally_pipeline.orchestration.projection_refresh import PROJECTION_ASSETS, PROJECTION_REFRESH_JOB

projection_refresh_job = dg.define_asset_job(
    PROJECTION_REFRESH_JOB, selection=dg.AssetSelection.assets(*PROJECTION_ASSETS),
    description="Re-fold the resources touched since the last refresh into current_resources and resource_intervals.",
)
