"""Every alert, defined once: its condition, thresholds, runbook, Dagster check and Prometheus rule.

``ALERTS`` is the one list. The Dagster asset checks and their sensors (defs/alerts/), the reports of
those checks by sync runs and ingest (orchestration/alert_states.py), ``services.alerts.evaluate`` and
the Prometheus rules file ``docs/alerts/prometheus-rules.yaml`` (``core.alert_rules``, held equal to
the committed file by a test) are all made from it. Adding an alert is one ``AlertDef`` here, its
condition function in core/alerts.py (and, if it reads something new, that read in services/alerts.py)
and its runbook page ``docs/runbooks/<name>.md``.

An expression, summary or description names a threshold as ``{field}`` (a field of ``AlertSettings``,
config ``alerts.<field>``, listed in ``thresholds``): the rules carry the config's values, so the
Prometheus rule and the Dagster check cannot disagree on one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tally_pipeline.core import alerts as rules
from tally_pipeline.core.alerts import AlertSettings, Condition


@dataclass(frozen=True)
class AlertInputs:
    """What the conditions read, read once per evaluation (services/alerts.py reads it from the store)."""

    now: datetime
    clouds: tuple[str, ...]  # the configured clouds
    known: frozenset[str]  # the configured clouds and those named in alerts.clouds
    activity: tuple[rules.CloudActivity, ...] = ()
    last_success: Mapping[str, datetime] = field(default_factory=dict)
    last_runs: tuple[rules.LastRun, ...] = ()
    misconfigured: Mapping[str, str] = field(default_factory=dict)
    unrecorded: tuple[rules.UnrecordedFailure, ...] = ()
    ledger_skips: tuple[rules.LedgerSkip, ...] = ()
    latest_corrections: tuple[rules.LatestCorrections, ...] = ()
    type_activity: tuple[rules.TypeActivity, ...] = ()
    #: The service that notifies about each type, and where the provider's services publish (the
    #: provider's words, for the silent-service message).
    services: Mapping[str, str] = field(default_factory=dict)
    service_hint: str = ""


@dataclass(frozen=True)
class Check:
    """The Dagster asset check an alert is reported on (its sensor is ``<key>_sensor``)."""

    asset: str
    condition: Callable[[AlertInputs, AlertSettings], Condition]
    # A configured cloud that never synced is unknown to this alert (a yellow WARN), not fine.
    unknown_until_synced: bool = False


#: The rules groups of the file, each with the comment above it: the API's /metrics, the collector's own.
API, COLLECTOR = "tally", "tally-collector"
GROUPS: Mapping[str, str] = {
    API: "",
    COLLECTOR: "The notification bus collector's own /metrics (`tally collect PROVIDER`, docs/collector.md): one "
               "series set per collector process, so these rules keep the instance label.",
}


@dataclass(frozen=True)
class AlertDef:
    name: str  # the Prometheus alert, the condition's ``alert`` and the runbook's file name
    key: str  # the Dagster check's name and evaluate()'s key
    description: str  # when it fires (the rule's comment)
    expr: str  # PromQL over /metrics
    severity: str  # the rule's ``severity`` label: page or ticket
    summary: str  # the rule's summary annotation (Prometheus templates allowed)
    for_: str | None = None  # how long the expression must hold before Prometheus fires
    thresholds: tuple[str, ...] = ()  # the AlertSettings fields the condition and the texts read
    check: Check | None = None  # None: the rule only (a check of its own elsewhere, or the collector's)
    group: str = API

    @property
    def runbook(self) -> str:
        return f"docs/runbooks/{self.name}.md"


ALERTS: tuple[AlertDef, ...] = (
    AlertDef(
        "TallyCloudEventsSilent", "events_silent",
        "A cloud that sent collector events has had none for {events_silent_after}, when it is known (configured, "
        "or in alerts.clouds) or had some in the last {events_active_window}. Unknown clouds are one series, "
        "cloud=\"other\".",
        """\
(time() - max by (cloud) (tally_cloud_last_collector_event_timestamp_seconds)) > {events_silent_after}
and
(
  (time() - max by (cloud) (tally_cloud_last_collector_event_timestamp_seconds)) < {events_active_window}
  or on (cloud) max by (cloud) (tally_cloud_known) == 1
)""",
        "page", "No collector events from cloud {{ $labels.cloud }} for over {events_silent_after}", for_="5m",
        thresholds=("events_silent_after", "events_active_window"),
        check=Check("event_log", lambda i, s: rules.events_silent(i.activity, i.now, s, i.known))),
    AlertDef(
        "TallySyncErrors", "sync_errors",
        "The cloud's latest reconciliation failed, or was partial (a type not listed, e.g. for insufficient_scope, "
        "or deletes held by the mass-delete guard), or left deletes the platform did not confirm, listed items it "
        "could not read, or resources it booked after too long in transition.",
        """\
max by (cloud) (tally_sync_last_failed) == 1
or max by (cloud) (tally_sync_last_unconfirmed) > 0
or max by (cloud) (tally_sync_last_skipped) > 0
or max by (cloud) (tally_sync_last_stuck_transition) > 0""",
        "ticket", "Reconciliation of {{ $labels.cloud }} is failing", for_="20m",
        check=Check("sync_runs", lambda i, s: rules.sync_errors(i.last_runs, i.misconfigured, i.unrecorded),
                    unknown_until_synced=True)),
    AlertDef(
        "TallySyncStale", "sync_stale",
        "A configured cloud without a successful (or partial) sync for {sync_stale_after}, or never.",
        """\
(time() - max by (cloud) (tally_sync_last_success_timestamp_seconds)) > {sync_stale_after}
or
(max by (cloud) (tally_sync_configured) unless on (cloud) max by (cloud) (tally_sync_last_success_timestamp_seconds))""",
        "page", "No successful reconciliation of {{ $labels.cloud }} for over {sync_stale_after}", for_="5m",
        thresholds=("sync_stale_after",),
        check=Check("sync_runs", lambda i, s: rules.sync_stale(i.clouds, i.last_success, i.now, s))),
    AlertDef(
        "TallyReconciliationDriftHigh", "drift_high",
        "The latest sync corrected more than {drift_high} of the cloud's live resources (past the cloud's first "
        "{drift_warmup_syncs} syncs, alerts.drift_warmup_syncs: they correct what its events missed before tally "
        "listened), or held deletes behind the mass-delete guard.",
        """\
(max by (cloud) (tally_sync_last_drift_ratio) > {drift_high}
 and max by (cloud) (tally_sync_reconciled_runs) > {drift_warmup_syncs})
or
max by (cloud) (tally_sync_last_guard_tripped) == 1""",
        "ticket", "Reconciliation of {{ $labels.cloud }} is correcting a lot",
        thresholds=("drift_high", "drift_warmup_syncs"),
        check=Check("sync_runs", lambda i, s: rules.drift_high(i.last_runs, s), unknown_until_synced=True)),
    AlertDef(
        "TallyServiceEventsSilent", "service_events_silent",
        "A configured cloud's latest sync (past its first {drift_warmup_syncs}, alerts.drift_warmup_syncs) created, "
        "deleted or recovered resources of a type while the collector stored no event of that type since the sync "
        "before it (or ever), though it stores the cloud's events of other types: the type's service publishes "
        "where the collector does not listen (docs/collector.md says where each service publishes). "
        "A cloud with no collector events is TallyCloudEventsSilent's.",
        """\
(
  max by (cloud, resource_type) (tally_sync_last_corrections) > 0
  and on (cloud) max by (cloud) (tally_sync_reconciled_runs) > {drift_warmup_syncs}
  and on (cloud) max by (cloud) (tally_sync_configured) == 1
)
unless on (cloud, resource_type)
(
  max by (cloud, resource_type) (tally_cloud_type_last_collector_event_timestamp_seconds)
  >= on (cloud) group_left max by (cloud) (tally_sync_previous_success_timestamp_seconds)
)
and on (cloud, resource_type)
(
  count by (cloud) (max by (cloud, resource_type) (tally_cloud_type_last_collector_event_timestamp_seconds))
  - on (cloud) group_right
  (
    count by (cloud, resource_type) (max by (cloud, resource_type) (tally_cloud_type_last_collector_event_timestamp_seconds))
    or on (cloud, resource_type) 0 * max by (cloud, resource_type) (tally_sync_last_corrections)
  )
) > 0""",
        "ticket", "The sync finds {{ $labels.resource_type }} changes in {{ $labels.cloud }} that no collector "
                  "event told of: is the collector bound to that service's exchange?",
        thresholds=("drift_warmup_syncs",),
        check=Check("sync_runs", lambda i, s: rules.service_events_silent(i.latest_corrections, i.type_activity,
                                                                          i.clouds, s, i.services, i.service_hint),
                    unknown_until_synced=True)),
    AlertDef(
        "TallyLedgerEntitiesSkipped", "ledger_entities_skipped",
        "The latest posting cycle skipped an entity, or posted one without intervals the meters cannot read: "
        "usage is unbilled until the history (or the registry) is corrected.",
        "max by (reason) (tally_ledger_last_cycle_skipped) > 0",
        "ticket", "The ledger left usage unbilled ({{ $labels.reason }})",
        check=Check("ledger_postings", lambda i, s: rules.ledger_entities_skipped(i.ledger_skips))),
    AlertDef(
        # Its checks are per cloud whose platform reports its own usage, in their own daily job: defs/ledger/usage_audit.py.
        "TallyUsageAuditFailed", "usage_audit",
        "The latest audit of a configured cloud against the platform's own usage report found "
        "a project whose instance-hours or vCPU-hours differ from the platform's beyond the tolerance with no known "
        "explanation (a tampered or lost posting, a server billed that the platform never ran, one it ran that "
        "tally does not bill), or could not be made at all; or a cloud that was audited has not been for two days "
        "(the daily usage_audit schedule stopped).",
        """\
max by (cloud) (tally_usage_audit_last_failed) == 1
or
time() - max by (cloud) (tally_usage_audit_last_timestamp_seconds) > 2 * 86400""",
        "ticket", "The ledger of {{ $labels.cloud }} disagrees with the platform's own usage, unexplained"),
    AlertDef(
        "TallyCollectorBrokerUnreachable", "collector_broker_unreachable",
        "The collector has not been consuming for 5 minutes (no connection, login refused, its queues refused), "
        "or one of its exchanges stays unbound (missing, or not readable by its user): that service's "
        "notifications are not read, and pile up in the broker or are dropped.",
        """\
max by (instance) (tally_collector_broker_connected) == 0
or
min by (instance, exchange) (tally_collector_exchange_bound) == 0""",
        "page", "Collector {{ $labels.instance }} is not reading the notification bus{{ with $labels.exchange }} "
                "(exchange {{ . }}){{ end }}", for_="5m", group=COLLECTOR),
    AlertDef(
        "TallyCollectorBufferGrowing", "collector_buffer_growing",
        "Events wait in the collector's disk buffer: the oldest for over 15 minutes, or the buffer is more than "
        "half full, or it is refusing batches (full or failing disk: messages stay in the broker), or its disk is "
        "full (it still sends what it holds; /healthz answers 503).",
        """\
max by (instance) (tally_collector_oldest_buffered_age_seconds) > 900
or
max by (instance) (tally_collector_buffered_bytes / tally_collector_buffer_limit_bytes) > 0.5
or
max by (instance) (tally_collector_buffered_events / tally_collector_buffer_limit_events) > 0.5
or
max by (instance) (tally_collector_buffer_blocked) == 1
or
max by (instance) (tally_collector_buffer_disk_full) == 1""",
        "page", "Collector {{ $labels.instance }} is not getting its buffered events into the API", for_="10m",
        group=COLLECTOR),
)

BY_KEY: Mapping[str, AlertDef] = {a.key: a for a in ALERTS}
#: The alerts reported as Dagster asset checks (one sensor each), by key.
CHECKED: Mapping[str, AlertDef] = {a.key: a for a in ALERTS if a.check is not None}


def check_of(key: str) -> Check:
    """The Dagster check of a checked alert (``CHECKED``)."""
    check = CHECKED[key].check
    assert check is not None
    return check


def evaluate(inputs: AlertInputs, settings: AlertSettings) -> dict[str, Condition]:
    """Every checked alert's condition, by key."""
    return {key: check_of(key).condition(inputs, settings) for key in CHECKED}
