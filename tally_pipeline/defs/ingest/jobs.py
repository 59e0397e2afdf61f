"""The job the landing sensor starts: one run per day folder with new files."""

import dagster as dg

landing_job = dg.define_asset_job("landing_files", selection=dg.AssetSelection.assets("raw_event_batches"))
