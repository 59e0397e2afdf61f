"""The projections as assets: folded from the event log, kept fresh by declarative automation."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from tally_pipeline.orchestration.conditions import FOLLOWS_EVENTS
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.projection_refresh import projection_metadata
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.tags import POOL


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "current_resources", group_name="projection", deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="One row per resource: live, deleted or unborn, with project, size, lifecycle times.",
        ),
        dg.AssetSpec(
            "resource_intervals", group_name="projection", deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="Each resource's lifecycle: [start, end) intervals with project and size (docs/projection.md).",
        ),
        dg.AssetSpec(
            "projection_state", group_name="projection", deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="The fold's watermark: every event with seq up to it is folded into the two projection tables.",
        ),
    ],
    pool=POOL,
)
def resource_projection(context: dg.AssetExecutionContext, store: TallyStore) -> Iterator[dg.MaterializeResult[Any]]:
    """Re-fold the resources touched since the last refresh (a late event re-folds its resource's history)."""
    with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
        result = store.refresh_projection()
        context.log.info(f"re-folded {result.resources} resources up to event seq {result.watermark} in {result.seconds:.3f}s")
        snapshot = write_analyst_snapshot(context, store)
        for key, metadata in projection_metadata(store, result, "resource_projection").items():
            yield dg.MaterializeResult(asset_key=key, metadata={**metadata, **snapshot})
