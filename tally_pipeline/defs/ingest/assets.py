"""Ingest as the UI sees it: the event log and the dead letter (the landing-file batches: batches.py)."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from tally_pipeline.orchestration.alert_states import report
from tally_pipeline.orchestration.conditions import RECORDED_BY_WRITERS
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.table_metadata import (
    cloud_activity_metadata,
    dead_letter_metadata,
    event_log_metadata,
)
from tally_pipeline.orchestration.tags import POOL


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "event_log", group_name="ingest", deps=["raw_event_batches"],
            automation_condition=RECORDED_BY_WRITERS,
            description=(
                "The event log (table events): one row per distinct event_id, written only by the ingest core — by "
                "the API, landing files and reconciliation. Materializing it records its counts; what the API and "
                "the syncs write is recorded as materializations too (api_writes_sensor, each sync run)."
            ),
        ),
        dg.AssetSpec(
            "cloud_activity", group_name="ingest", deps=["raw_event_batches"],
            automation_condition=RECORDED_BY_WRITERS,
            description=(
                "Per cloud: first and last collector event stored, counts by source; kept by the ingest transaction. "
                "The events_silent alert reads it."
            ),
        ),
    ],
    pool=POOL,  # it opens the database (an embedded file: one process at a time)
)
def event_log(context: dg.AssetExecutionContext, store: TallyStore) -> Iterator[dg.MaterializeResult[Any]]:
    with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
        snapshot = write_analyst_snapshot(context, store)  # what it records (the API's writes) reaches analysts
        yield dg.MaterializeResult(asset_key="event_log", metadata={**event_log_metadata(store), **snapshot})
        yield dg.MaterializeResult(asset_key="cloud_activity", metadata={**cloud_activity_metadata(store), **snapshot})
        report(context, store, ["events_silent"])


@dg.asset(
    group_name="ingest",
    deps=["raw_event_batches"],
    automation_condition=RECORDED_BY_WRITERS,
    description="The dead letter (table rejected_events): every refused item or body, with its reason and raw form.",
    pool=POOL,
)
def dead_letter(context: dg.AssetExecutionContext, store: TallyStore) -> dg.MaterializeResult[Any]:
    with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
        snapshot = write_analyst_snapshot(context, store)
        return dg.MaterializeResult(metadata={**dead_letter_metadata(store), **snapshot})
