"""The run requests of reconciliation: one per cloud at each tick, and follow-ups when deferrals are due.

A tick's time is its poll time and its run key, so a retried tick writes the same event ids.
"""

from collections.abc import Iterable
from datetime import datetime

import dagster as dg

from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.orchestration.tags import CLOUD, POLL_TIME, RUN_KEY


def reconciliation_requests(clouds: list[str], tick: datetime) -> list[dg.RunRequest]:
    """One run per cloud; the tick time is both poll time and run key, so a retried tick writes the same ids."""
    tick = to_utc(tick)
    stamp = format_rfc3339(tick)
    return [
        dg.RunRequest(run_key=f"{cloud}@{stamp}", partition_key=cloud,
                      tags={POLL_TIME: stamp, RUN_KEY: f"tick:{stamp}", CLOUD: cloud})
        for cloud in sorted(clouds)
    ]


def follow_up_requests(due_follow_ups: Iterable[tuple[str, datetime]], clouds: list[str],
                       now: datetime) -> list[dg.RunRequest]:
    """Clouds whose latest run deferred something that is now due, and that no run has looked at since
    (the store's ``due_follow_ups``: (cloud, due at) pairs), among ``clouds``."""
    requests = []
    for cloud, due in due_follow_ups:
        if cloud not in clouds:
            continue
        stamp = format_rfc3339(to_utc(now))
        requests.append(dg.RunRequest(
            run_key=f"{cloud}@follow-up:{format_rfc3339(to_utc(due))}", partition_key=cloud,
            tags={POLL_TIME: stamp, RUN_KEY: f"follow-up:{stamp}", CLOUD: cloud},
        ))
    return requests
