"""The job the landing sensor starts: one run per day folder with new files."""

import dagster as dg

from tally_pipeline.defs.ingest.assets import raw_event_batches

landing_job = dg.define_asset_job("landing_files", selection=[raw_event_batches])
