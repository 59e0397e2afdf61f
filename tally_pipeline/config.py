"""The configuration file: one YAML document, validated with pydantic, with errors that name the bad key.

Found from ``--config FILE`` or ``TALLY_CONFIG``; with neither, the embedded default applies (a
DuckDB file under ``./.tally/``). ``--database URL`` overrides the file's database.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.core.landing import LandingLimits
from tally_pipeline.core.registry import STATUS_NAME
from tally_pipeline.redaction import redact, remember_url_password, yaml_error_text
from tally_pipeline.schemas import default_registry

DEFAULT_DATABASE = "duckdb://.tally/tally.duckdb"
CLOUD_NAME = r"^[A-Za-z0-9_.-]{1,63}$"
CONFIG_ENV = "TALLY_CONFIG"


class ConfigError(ConfigurationError, ValueError):
    """A configuration that cannot be used; the message names the file and the key.

    The message is redacted: a YAML error quotes the offending line, which may be the database URL.
    """

    def __init__(self, message: str):
        super().__init__(redact(message))


class UnknownCloud(ConfigurationError, KeyError):
    """A cloud name the configuration does not list."""

    def __str__(self) -> str:
        return str(self.args[0])


class MisconfiguredCloud(UnknownCloud):
    """A cloud the config file names with an invalid entry (loaded with ``isolate_clouds``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SimulatedCloud(_Strict):
    """A cloud played by the ground-truth simulator (tests, the demo, accuracy benchmarks).

    Without ``start`` the simulated window ends at the current hour (now floored to the hour), so a
    sync at wall-clock time always finds a simulated cloud to look at.
    """

    provider: Literal["simulated"]
    seed: int = 1
    projects: int = Field(default=4, ge=1)
    resources: int = Field(default=60, ge=0, description="resources alive at any time, roughly")
    hours: float = Field(default=48.0, gt=0)
    start: str | None = Field(default=None, description="RFC 3339 start of the window; default: ends at the current hour")
    churn: float = Field(default=1.0, gt=0, description="multiplies create, update and delete rates")
    loss: float = Field(default=0.0, ge=0, le=1, description="probability a collector event is lost")
    duplicates: float = Field(default=0.0, ge=0, le=1, description="probability an event is delivered twice")
    retention_hours: float = Field(default=24.0, gt=0, description="how long deleted servers stay listed")
    failing_types: dict[str, Literal["error", "timeout", "empty", "down_cell"]] = Field(default_factory=dict)

    @field_validator("start")
    @classmethod
    def _rfc3339(cls, value: str | None) -> str | None:
        from tally_pipeline.core.timeutil import TimestampError, parse_rfc3339

        if value is not None:
            try:
                parse_rfc3339(value)
            except TimestampError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("failing_types")
    @classmethod
    def _simulated_types(cls, value: dict[str, str]) -> dict[str, str]:
        known = default_registry().in_order  # the simulator plays every packaged type
        for name, mode in value.items():
            if name not in known:
                raise ValueError(f"{name!r} is not a simulated type (known: {', '.join(known)})")
            if mode == "down_cell" and name != "instance":
                # refused here, not when the simulation is built (a ValueError in the middle of a sync)
                raise ValueError(f"{name}: down_cell is a nova fault, for instance only; give {name} error, "
                                 "timeout or empty")
        return value


class OpenStackCloud(_Strict):
    """A cloud reached through openstacksdk: a clouds.yaml entry, or inline auth settings.

    With neither ``os_cloud`` nor ``auth``, the SDK's own environment lookup applies
    (``OS_CLOUD`` or ``OS_*`` variables), as for any OpenStack tool.
    """

    provider: Literal["openstack"]
    os_cloud: str | None = None
    auth: dict[str, Any] | None = None
    auth_type: str | None = None
    region_name: str | None = None
    interface: str | None = None
    verify: bool | str | None = None
    timeout: float = Field(default=90.0, gt=0, description="seconds per request before it counts as failed; "
                           "above nova's 60 s cell timeout, so a slow cell answers instead of failing the listing")
    retries: int = Field(default=2, ge=0, le=10, description="retries after a connection failure, timeout or HTTP 429/502/503/504")
    retry_delay: float | None = Field(default=None, ge=0, description="seconds between retries; default: exponential from 0.5 s")
    max_retry_delay: float = Field(default=30.0, ge=0, description="seconds: the longest wait a Retry-After header may impose")
    all_projects_roles: dict[str, list[str]] = Field(
        default_factory=dict,
        description="per type, roles this deployment's policy lets list every project, beyond the upstream defaults")
    page_size: int = Field(default=1000, ge=1, le=1000)
    deleted_margin: int = Field(
        default=0, ge=0,
        description="extra seconds subtracted when asking for deleted servers (the sync already asks from its last run minus 10 minutes)",
    )
    resource_types: list[str] | None = None

    @field_validator("resource_types")
    @classmethod
    def _openstack_types(cls, value: list[str] | None) -> list[str] | None:
        known = default_registry().in_order  # the adapter maps every packaged type
        for name in value or ():
            if name not in known:
                raise ValueError(f"{name!r} is not an OpenStack resource type (known: {', '.join(known)})")
        return value

    @field_validator("all_projects_roles")
    @classmethod
    def _role_types(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        cls._openstack_types(list(value))
        return value


CloudConfig = Annotated[SimulatedCloud | OpenStackCloud, Field(discriminator="provider")]


class ReconciliationSettings(_Strict):
    settle_window: float = Field(default=300.0, ge=0, description="seconds")
    mass_delete_guard: float = Field(default=0.5, gt=0, le=1.0)
    stuck_transition_hours: float = Field(
        default=24.0, gt=0, description="hours in transition after which a resource is booked as listed")
    max_run_time: float = Field(default=1800.0, gt=0, description="seconds a run may list and confirm for")
    lock_lease: float = Field(default=300.0, ge=1, description="seconds a run's lock lasts unless renewed "
                              "(renewed every third of it while the run lives)")

    def run_options(self) -> RunOptions:
        """The keyword arguments ``sync.run_sync`` takes from this section."""
        return {"settle_window": self.settle_window, "mass_delete_guard": self.mass_delete_guard,
                "stuck_transition_hours": self.stuck_transition_hours, "max_run_time": self.max_run_time,
                "lock_lease": self.lock_lease}


class RunOptions(TypedDict):
    """What a reconciliation run takes from the ``reconciliation:`` section."""

    settle_window: float
    mass_delete_guard: float
    stuck_transition_hours: float
    max_run_time: float
    lock_lease: float


class LedgerSettings(_Strict):
    ingest_lag: float = Field(default=900.0, ge=0, description="seconds")
    window_days: int = Field(default=35, ge=1)


class MeterSettings(_Strict):
    """One meter's billing policy. Default (no entry): every platform status is billed, as ceilometer's
    notification meters and CloudKitty's default rating bill an instance whatever its power state
    (docs/ledger.md). A changed policy re-prices history on the next ledger cycle, as deltas."""

    unbilled_statuses: list[Annotated[str, StringConstraints(pattern=STATUS_NAME)]] = Field(
        default_factory=list,
        description="platform statuses this meter does not bill, as events carry them (e.g. shelved_offloaded)")


class AuditSettings(_Strict):
    """The usage audit against nova's own usage (``tally openstack audit-usage``, the per-cloud
    ``usage_audit`` checks; docs/openstack.md). A (project, meter) fails when its unexplained difference
    exceeds ``max(tolerance_hours, tolerance_ratio × nova's figure)``."""

    tolerance_hours: float = Field(default=1.0, ge=0, description="unexplained instance-hours (and vCPU-hours) "
                                   "per project that still pass")
    tolerance_ratio: float = Field(default=0.01, ge=0, le=1, description="unexplained share of nova's figure per "
                                   "project that still passes")
    rounding_seconds: int = Field(default=2, ge=0, le=3600, description="per server: a difference this small is "
                                  "nova's rounding (it keeps launched_at and terminated_at to the second)")
    window_hours: int = Field(default=24, gt=0, le=24 * 31, description="the Dagster check audits the last "
                              "window_hours, up to the last whole hour")
    page_size: int = Field(default=1000, ge=1, le=1000, description="servers per page of nova's usage API")


class AlertSettings(_Strict):
    events_silent_after: float = Field(default=3600.0, gt=0, description="seconds without collector events")
    events_active_window: float = Field(default=86400.0, gt=0, description="seconds: only clouds active this recently")
    sync_stale_after: float = Field(default=1800.0, gt=0, description="seconds since the last successful sync")
    drift_high: float = Field(default=0.05, gt=0, description="share of live resources corrected by one sync; "
                              "a cloud whose collectors lose events drifts about that share at steady state")
    drift_warmup_syncs: int = Field(default=2, ge=0, description="a cloud's first syncs not judged on drift "
                                    "nor on service silence (they correct what its events missed before tally "
                                    "listened)")
    clouds: list[Annotated[str, Field(pattern=CLOUD_NAME)]] = Field(
        default_factory=list,
        description="clouds fed only by collectors, known beside the configured ones: watched for silence and "
        "named on /metrics (every other unconfigured cloud is counted as 'other')")

    def rules(self) -> Any:
        from datetime import timedelta

        from tally_pipeline.core.alerts import AlertSettings as Rules

        return Rules(timedelta(seconds=self.events_silent_after), timedelta(seconds=self.events_active_window),
                     timedelta(seconds=self.sync_stale_after), self.drift_high, self.drift_warmup_syncs)


class AnalyticsSettings(_Strict):
    """Parquet snapshots of the asset tables, for analysts of an embedded DuckDB database."""

    snapshots: bool = Field(default=True, description="write a snapshot at the end of every run that writes the asset tables "
                                                       "(DuckDB)")
    snapshot_dir: Path | None = Field(default=None, description="default: snapshot/ beside the DuckDB file")


class DuckDBSettings(_Strict):
    """The embedded DuckDB file's connection (ignored on Postgres)."""

    threads: int | None = Field(
        default=None, ge=1,
        description="DuckDB's worker threads (default: one per core). Parallel threads speed up the large scans "
                    "(a projection rebuild) but cost every small statement a hand-off; 1 where small statements "
                    "are the work and another process has the other cores (the demo)")


class DeadLetterSettings(_Strict):
    retention_days: int = Field(default=30, ge=1, description="rows older than this are deleted by the daily purge")
    max_bytes_per_minute: int = Field(
        default=16 * 1024 * 1024, ge=1024,
        description="dead-lettered bytes one token may cause per minute (per API process); beyond: 429")


class LandingSettings(_Strict):
    """What one landing file may hold (``tally ingest`` and the ``raw_event_batches`` asset)."""

    max_item_bytes: int = Field(default=5 * 1024 * 1024, ge=1024,
                                description="a line, or one element of a document; beyond: item_too_large, an excerpt kept")
    max_file_bytes: int = Field(default=4 * 1024**3, ge=1024, description="what a file may hold once decompressed")
    max_ratio: int = Field(default=100, ge=1, description="decompressed over compressed size of a gzip file")
    excerpt_bytes: int = Field(default=64 * 1024, ge=256, description="of a refused item, kept in the dead letter")
    follow_symlinks: bool = Field(default=False, description="read a landing file given by a symlink")
    max_rejected_rows: int = Field(default=1000, ge=1, description="refused items of one file kept in the dead "
                                   "letter one by one; the rest counted in one too_many_rejections row")
    max_rejected_bytes: int = Field(default=16 * 1024 * 1024, ge=1024,
                                    description="bytes of one file's dead-letter rows (texts and messages), at most")

    def limits(self) -> LandingLimits:
        return LandingLimits(self.max_item_bytes, self.max_file_bytes, self.max_ratio, self.excerpt_bytes,
                             self.follow_symlinks, self.max_rejected_rows, self.max_rejected_bytes)


class ApiSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, description="request line and headers together")
    max_request_line_bytes: int = Field(default=8 * 1024, ge=256)
    header_timeout: float = Field(default=10.0, gt=0, description="seconds from connection (or previous answer) to the end of the headers")
    body_timeout: float = Field(default=60.0, gt=0, description="seconds from the end of the headers to the end of the declared body")
    keep_alive_timeout: int = Field(default=5, ge=1, description="seconds an idle connection is kept between requests")
    max_connections: int | None = Field(default=1000, ge=1, description="beyond this many open connections a request is answered 503")
    max_connections_per_client: int | None = Field(
        default=200, ge=1, description="connections one client address may hold open at once (per API process); beyond: "
        "503 too_many_connections. Behind a proxy every client is the proxy's address: raise it above the proxy's "
        "connection pool, or set null")
    sync_workers: int = Field(default=2, ge=1, le=64, description="syncs one API process runs at a time (POST /internal/sync/{cloud}); 1 on DuckDB")
    sync_shutdown_grace: float = Field(
        default=10.0, ge=0, description="seconds a stopping API process waits for its running syncs before recording them failed")


class DagsterSettings(_Strict):
    """A Dagster webserver that runs the syncs the API is asked for, as runs of the reconciliation job."""

    url: str = Field(description="the webserver's address, e.g. http://dagster-webserver:3000 (GraphQL is at /graphql)")
    location: str | None = Field(default=None, description="code location name; default: the one holding the job")
    repository: str | None = Field(default=None, description="repository name; default: the one holding the job")
    job: str = Field(default="reconciliation", min_length=1)
    timeout: float = Field(default=30.0, gt=0, description="seconds per GraphQL call")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("must be an http:// or https:// address of the Dagster webserver, e.g. http://dagster:3000")
        return value


_NAME = r"^[A-Za-z0-9_.-]{1,200}$"
DEFAULT_TOPICS = ("notifications", "versioned_notifications")
#: The exchange each service publishes its notifications on in a stock deployment: its own control
#: exchange, or oslo.messaging's default ``openstack`` for one that sets none (cinder).
DEFAULT_SERVICE_EXCHANGES = {"nova": "nova", "cinder": "openstack", "neutron": "neutron", "glance": "glance",
                             "octavia": "octavia"}


class CollectorSettings(_Strict):
    """``tally collect openstack``: the notification bus collector (docs/collector.md).

    Every key can also be given on the command line, which wins; secrets can come from the
    environment instead of this file (``TALLY_COLLECTOR_TRANSPORT_PASSWORD``, ``TALLY_COLLECTOR_TOKEN``).
    """

    cloud: str | None = Field(default=None, pattern=CLOUD_NAME, description="the cloud its events are for")
    transport_url: str | None = Field(
        default=None, description="oslo.messaging transport URL of the cloud's RabbitMQ, e.g. rabbit://tally@rabbit:5672/")
    api_url: str | None = Field(default=None, description="base URL of the ingest API")
    token_file: Path | None = Field(default=None, description="file holding the API bearer token")
    buffer_dir: Path | None = Field(default=None, description="the disk buffer's directory (local filesystem)")
    pool: str = Field(default="tally", pattern=_NAME, description="names the collector's queues: <pool>.<topic>")
    topics: list[str] = Field(default_factory=lambda: list(DEFAULT_TOPICS), min_length=1)
    service_exchanges: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_SERVICE_EXCHANGES), min_length=1,
        description="service -> the exchange it publishes on (its [DEFAULT] control_exchange, else openstack)")
    #: replaced by ``service_exchanges``; kept only to say so when an old config still has it
    exchanges: list[str] | None = Field(default=None, description="replaced by service_exchanges")
    amqp_durable_queues: bool = Field(
        default=False, description="as the services' [oslo_messaging_rabbit] amqp_durable_queues (or "
                                   "rabbit_quorum_queue): the exchanges are declared durable")
    amqp_auto_delete: bool = Field(default=False, description="as the services' [oslo_messaging_rabbit] "
                                                              "amqp_auto_delete")
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=8081, ge=0, le=65535)
    durable_queues: bool = Field(default=True, description="the collector's queues survive a broker restart")
    queue_type: Literal["classic", "quorum"] = "classic"
    prefetch: int = Field(default=1000, ge=1, le=65535, description="unacknowledged messages per queue, at most")
    batch_size: int = Field(default=500, ge=1, le=10_000, description="messages buffered in one fsync'd write")
    batch_timeout: float = Field(default=0.2, gt=0, le=60, description="seconds a read message waits for its batch")
    heartbeat: int = Field(default=60, ge=0, le=3600, description="AMQP heartbeat in seconds (0: none)")
    reconnect_max_delay: float = Field(default=60.0, ge=1, description="longest wait between reconnections (s)")
    rebind_interval: float = Field(default=30.0, gt=0, description="seconds between declaring and binding the "
                                   "exchanges again (one missing, or deleted under the collector)")
    max_buffered_events: int = Field(default=1_000_000, ge=1)
    max_buffered_bytes: int = Field(default=1 << 30, ge=1024)
    max_bus_rejections: int = Field(default=100_000, ge=1, description="rejected bus messages kept (oldest go)")
    max_rejected_bytes: int = Field(default=64 << 20, ge=64 << 10,
                                    description="bytes the rejected log keeps at most (oldest go, counted)")
    buffer_reserve_bytes: int = Field(
        default=8 << 20, ge=0, description="disk kept allocated beside the buffer and freed when the disk is full, "
                                           "so the sender can still take events out (0: none)")
    drain_timeout: float = Field(default=20.0, ge=0, description="seconds to empty the buffer after SIGTERM")

    @field_validator("topics")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        _check_names(value)
        if len(set(value)) != len(value):
            raise ValueError("names a value twice")
        return value

    @field_validator("service_exchanges")
    @classmethod
    def _service_names(cls, value: dict[str, str]) -> dict[str, str]:
        _check_names([*value, *value.values()])
        return value

    @field_validator("exchanges")
    @classmethod
    def _replaced(cls, value: list[str] | None) -> None:
        if value is not None:
            raise ValueError("replaced by collector.service_exchanges (--service-exchange SERVICE=EXCHANGE), a "
                             "mapping of each service to the exchange it publishes on, e.g. {nova: nova, cinder: "
                             "openstack}; cinder publishes on openstack unless its control_exchange is set")
        return None

    @field_validator("transport_url")
    @classmethod
    def _rabbit(cls, value: str | None) -> str | None:
        if value is not None:
            remember_url_password(value)
            if not value.startswith("rabbit://"):
                raise ValueError("must be an oslo.messaging rabbit:// URL")
        return value


def _check_names(names: list[str]) -> None:
    import re

    for name in names:
        if not re.match(_NAME, name):
            raise ValueError(f"{name!r} must match {_NAME}")


class TallyConfig(_Strict):
    database: str = DEFAULT_DATABASE
    tokens_file: Path | None = None
    schemas_dir: Path | None = None
    landing_dir: Path | None = None
    landing: LandingSettings = Field(default_factory=LandingSettings)
    clouds: dict[str, CloudConfig] = Field(default_factory=dict)
    reconciliation: ReconciliationSettings = Field(default_factory=ReconciliationSettings)
    ledger: LedgerSettings = Field(default_factory=LedgerSettings)
    #: per meter name (vcpu_hours, ram_gb_hours, …): which platform statuses it does not bill
    meters: dict[str, MeterSettings] = Field(default_factory=dict)
    api: ApiSettings = Field(default_factory=ApiSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    analytics: AnalyticsSettings = Field(default_factory=AnalyticsSettings)
    duckdb: DuckDBSettings = Field(default_factory=DuckDBSettings)
    collector: CollectorSettings = Field(default_factory=CollectorSettings)
    dagster: DagsterSettings | None = None  # set: POST /internal/sync/{cloud} launches Dagster runs
    first_day: date | None = Field(default=None, description="the first UTC day of the daily partitions "
                                   "(landing batches, usage_daily); default: ledger.window_days before today")

    # Clouds whose entry was set aside as invalid (``load_config(isolate_clouds=True)``): name -> reason.
    _misconfigured: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def misconfigured_clouds(self) -> dict[str, str]:
        """Clouds named in the file whose entry is invalid, each with its one-line reason (naming the key)."""
        return dict(self._misconfigured)

    def cloud_names(self) -> list[str]:
        """Every cloud the file names, misconfigured ones included."""
        return sorted({*self.clouds, *self._misconfigured})

    @model_validator(mode="after")
    def _known_meters(self) -> TallyConfig:
        # with a schemas_dir the meters are known only once it is loaded (the runtime checks then)
        if self.schemas_dir is None:
            known = {m.name for m in default_registry().meters()}
            unknown = sorted(set(self.meters) - known)
            if unknown:
                raise ValueError(f"meters: {', '.join(unknown)} is not a meter (known: {', '.join(sorted(known))})")
        return self

    @field_validator("database")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("duckdb://", "postgresql://", "postgres://")):
            raise ValueError("must be a duckdb:///path or postgresql://… URL")
        return value

    @field_validator("clouds")
    @classmethod
    def _cloud_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        import re

        for name in value:
            if not re.match(r"^[A-Za-z0-9_.-]{1,63}$", name):
                raise ValueError(f"cloud name {name!r} must match ^[A-Za-z0-9_.-]{{1,63}}$")
        return value


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
        else:
            lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


def _set_aside_bad_clouds(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``data`` without the cloud entries that do not validate, and those clouds' reasons."""
    clouds = data.get("clouds")
    if not isinstance(clouds, dict):
        return data, {}  # not a mapping at all: the whole file is wrong, and says so
    bad = {}
    for name, entry in clouds.items():
        try:
            TallyConfig.model_validate({"clouds": {name: entry}})
        except ValidationError as exc:
            bad[str(name)] = _describe(exc)
    if not bad:
        return data, {}
    return {**data, "clouds": {n: e for n, e in clouds.items() if str(n) not in bad}}, bad


def load_config(path: str | Path | None = None, *, database: str | None = None,
                isolate_clouds: bool = False) -> TallyConfig:
    """Load and validate the configuration; ``path`` falls back to ``$TALLY_CONFIG``, then to defaults.

    ``isolate_clouds``: an invalid cloud entry does not fail the whole file; the cloud is left out of
    ``clouds`` and listed in ``misconfigured_clouds`` with its reason (the Dagster code location loads
    so, so that one cloud's typo never silences the others' schedules and alerts).

    Relative paths inside the file (tokens_file, schemas_dir, landing_dir, duckdb files) are taken
    relative to the file's own directory, so a config works wherever the command is started.
    """
    path = path or os.environ.get(CONFIG_ENV) or None
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(file)!r}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: not valid YAML: {yaml_error_text(exc)}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: expected a mapping of settings at the top level")
        data = loaded
        base = file.resolve().parent
    if database is not None:
        data = {**data, "database": database}
    if isinstance(data.get("database"), str):
        remember_url_password(data["database"])  # before validation: its errors are printed too
    origin = str(path) if path else "configuration"
    misconfigured: dict[str, str] = {}
    if isolate_clouds:
        data, misconfigured = _set_aside_bad_clouds(data)
    try:
        config = TallyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_describe(exc)}") from None
    config = _resolve_paths(config, base)
    config._misconfigured = {name: redact(f"{origin}: {reason}") for name, reason in misconfigured.items()}
    return config


def _resolve_paths(config: TallyConfig, base: Path) -> TallyConfig:
    updates: dict[str, Any] = {}
    for key in ("tokens_file", "schemas_dir", "landing_dir"):
        value = getattr(config, key)
        if value is not None and not value.is_absolute():
            updates[key] = base / value
    collector = {key: base / value for key in ("token_file", "buffer_dir")
                 if (value := getattr(config.collector, key)) is not None and not value.is_absolute()}
    if collector:
        updates["collector"] = config.collector.model_copy(update=collector)
    if config.database.startswith("duckdb://"):
        # duckdb://PATH takes PATH literally: duckdb:///abs/x.duckdb is absolute, duckdb://x.duckdb relative.
        local = config.database.removeprefix("duckdb://")
        if local and local != ":memory:" and not Path(local).is_absolute():
            updates["database"] = "duckdb://" + str(base / local)
    return config.model_copy(update=updates) if updates else config
