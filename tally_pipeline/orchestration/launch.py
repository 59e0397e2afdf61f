"""Syncs the API is asked for (``POST /internal/sync/{cloud}``), run as Dagster runs of the
reconciliation job when the config names a Dagster webserver (``dagster:``), so that the UI shows them.

The API reserves the run first (``sync_launch.reserve``), then submits the job through the
webserver's GraphQL API (dagster-graphql's client) for the cloud's partition, tagged with the
reserved run's id (``tally/sync_run_id``): the job's ``sync_runs`` step executes that run, so the
id the API answered, the ``sync_runs`` row and the Dagster run's tag agree.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from tally_pipeline.config import DagsterSettings
from tally_pipeline.orchestration.tags import CLOUD, RUN_KEY, SYNC_RUN_ID
from tally_pipeline.services.reconciliation_launch import run_key_of
from tally_pipeline.store.sync_requests import Executor, SyncRequest

#: Dagster's own tag naming the partition a run of a partitioned job materializes.
PARTITION_TAG = "dagster/partition"
#: Dagster run statuses after which the run writes nothing more.
_ENDED = ("SUCCESS", "FAILURE", "CANCELED")


class DagsterSyncExecutor:
    """Submits reserved syncs as runs of the reconciliation job to a Dagster webserver."""

    name: Executor = "dagster"

    def __init__(self, settings: DagsterSettings):
        self.settings = settings
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from dagster_graphql import DagsterGraphQLClient  # imports Dagster: only where it is used

                url = urlsplit(self.settings.url)
                self._client = DagsterGraphQLClient(
                    url.hostname or "", port_number=url.port, use_https=url.scheme == "https",
                    timeout=max(1, round(self.settings.timeout)), path_prefix=url.path.rstrip("/"),
                )
            return self._client

    def tags(self, cloud: str, run_id: str) -> dict[str, str]:
        return {PARTITION_TAG: cloud, CLOUD: cloud, SYNC_RUN_ID: run_id, RUN_KEY: run_key_of(run_id)}

    def submit(self, cloud: str, run_id: str) -> str:
        """The Dagster run's id; raises (dagster-graphql's error) when the webserver refuses or cannot be reached."""
        run: str = self.client().submit_job_execution(  # dagster-graphql's client is untyped
            self.settings.job, repository_location_name=self.settings.location,
            repository_name=self.settings.repository, tags=self.tags(cloud, run_id),
        )
        return run

    def ended_without_record(self, request: SyncRequest) -> str | None:
        """A reserved run whose Dagster run ended (failed or canceled before the sync began, e.g. in the
        queue) never records its end: say so. None while it may still, or when Dagster cannot say."""
        if request.dagster_run_id is None:
            return None
        try:
            status = self.client().get_run_status(request.dagster_run_id)
        except Exception:  # noqa: BLE001 - no answer is no information: the lock lease still expires the run
            return None
        name = getattr(status, "value", str(status))
        if name not in _ENDED:
            return None
        return f"its Dagster run {request.dagster_run_id} ended {name} without recording the sync's end"

    def close(self) -> None:
        """Nothing to stop: the runs are Dagster's."""
