"""``tally collect openstack``: read a cloud's notification bus and feed the ingest API (docs/collector.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from tally_pipeline.commands._bench_report import print_report

TOKEN_ENV = "TALLY_COLLECTOR_TOKEN"
PASSWORD_ENV = "TALLY_COLLECTOR_TRANSPORT_PASSWORD"


def _settings(config_path: str | None, given: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The config file's ``collector:`` section with the command line's values over it, validated; and the
    file's clouds."""
    from pydantic import ValidationError

    from tally_pipeline.config import CollectorSettings, ConfigError, load_config

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    section = config.collector
    merged = {**section.model_dump(exclude_unset=True), **{k: v for k, v in given.items() if v not in (None, ())}}
    try:
        settings = CollectorSettings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(f"collector.{'.'.join(map(str, e['loc']))} (--{str(e['loc'][0]).replace('_', '-')}): "
                             f"{e['msg']}" for e in exc.errors(include_url=False))
        raise click.ClickException(problems) from None
    missing = [key for key in ("cloud", "transport_url", "api_url", "buffer_dir") if getattr(settings, key) is None]
    if missing:
        raise click.ClickException("; ".join(
            f"no {key}: give --{key.replace('_', '-')}, ${_ENV[key]} or collector.{key} in the config file"
            for key in missing))
    return settings, config.clouds


_ENV = {"cloud": "TALLY_COLLECTOR_CLOUD", "transport_url": "TALLY_COLLECTOR_TRANSPORT_URL",
        "api_url": "TALLY_COLLECTOR_URL", "buffer_dir": "TALLY_COLLECTOR_BUFFER_DIR"}


def volume_type_names(clouds: dict[str, Any], cloud: str) -> Any:
    """A reader of cinder's volume type names (id → name) for ``cloud`` when the config's ``clouds:`` holds it
    as an OpenStack cloud, else None. Cinder's notifications name a type by its id, its API by its name:
    with the names both paths agree (without them reconciliation corrects each new volume's type once).
    The reader returns None when the cloud's API cannot say (the collector then keeps the ids)."""
    import logging

    entry = clouds.get(cloud)
    if entry is None or getattr(entry, "provider", None) != "openstack":
        return None
    log = logging.getLogger("tally_pipeline.collector")

    def read() -> dict[str, str] | None:
        from tally_pipeline.providers import adapter_for
        from tally_pipeline.providers.openstack.adapter import OpenStackAdapter

        try:
            adapter = adapter_for(cloud, entry)
            assert isinstance(adapter, OpenStackAdapter)  # the entry's provider, checked above
            try:
                return adapter.volume_type_names()
            finally:
                getattr(adapter, "close", lambda: None)()
        except Exception as exc:  # the bus is read all the same; the names come at the next try
            log.warning("cannot read cinder's volume type names of %s (%s: %s): volume types stay ids for now",
                        cloud, type(exc).__name__, exc)
            return None
    return read


def _pairs(given: tuple[str, ...]) -> dict[str, str] | None:
    """``--service-exchange`` values (SERVICE=EXCHANGE) as a mapping; None when none is given."""
    pairs: dict[str, str] = {}
    for item in given:
        service, sep, exchange = item.partition("=")
        if not sep or not service or not exchange:
            raise click.ClickException(f"--service-exchange {item!r}: give SERVICE=EXCHANGE, e.g. cinder=openstack")
        if service in pairs:
            raise click.ClickException(f"--service-exchange names {service!r} twice")
        pairs[service] = exchange
    return pairs or None


def _token(token_file: Path | None) -> str | None:
    if token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise click.ClickException(f"cannot read the token file {token_file}: {exc.strerror}") from None
    if not token:
        raise click.ClickException(f"the token file {token_file} is empty")
    return token


def _logging(level: str) -> None:
    import logging
    import sys

    from tally_pipeline.redaction import RedactingFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for chatty in ("amqp", "kombu", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))


@click.command("openstack")
@click.option("--config", "config_path", envvar="TALLY_CONFIG", type=click.Path(dir_okay=False),
              help="Configuration file (YAML) with a collector: section. Default: $TALLY_CONFIG.")
@click.option("--cloud", envvar=_ENV["cloud"], help="The cloud its events are for.")
@click.option("--transport-url", envvar=_ENV["transport_url"],
              help="The cloud's oslo.messaging transport URL, rabbit://user:pass@host:5672/vhost "
                   f"(the password may come from ${PASSWORD_ENV}).")
@click.option("--api-url", envvar=_ENV["api_url"], help="The ingest API's base URL.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"File holding the API bearer token (default: ${TOKEN_ENV}).")
@click.option("--buffer-dir", envvar=_ENV["buffer_dir"], type=click.Path(file_okay=False, path_type=Path),
              help="The disk buffer's directory, on a local filesystem.")
@click.option("--pool", help="Names the collector's queues, <pool>.<topic> (default: tally).")
@click.option("--topic", "topics", multiple=True,
              help="A topic to read; repeatable (default: notifications and versioned_notifications).")
@click.option("--service-exchange", "service_exchanges", multiple=True, metavar="SERVICE=EXCHANGE",
              help="A service and the exchange it publishes on; repeatable, replaces the whole mapping (default: "
                   "nova=nova cinder=openstack neutron=neutron glance=glance octavia=octavia).")
@click.option("--exchange", "exchanges", multiple=True, hidden=True,
              help="Replaced by --service-exchange.")
@click.option("--metrics-host", help="Address of /metrics and /healthz (default: 127.0.0.1).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Their port (default: 8081).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def collect_openstack(config_path: str | None, log_level: str, **given: Any) -> None:
    """Read the cloud's notifications off RabbitMQ into the disk buffer and send them to the API.

    Runs until SIGTERM or SIGINT; then stops reading, and exits 0 once the buffer is sent or the
    drain deadline passes (what is left is sent by the next start).
    """
    import signal
    import threading

    from tally_pipeline.collector.backoff import Backoff
    from tally_pipeline.collector.bus import BusSettings
    from tally_pipeline.collector.service import CollectorService, run
    from tally_pipeline.collector.transport import TransportURLError, broker_of

    _logging(log_level)
    given["service_exchanges"] = _pairs(given.get("service_exchanges") or ())
    from tally_pipeline.commands._options import shared

    s, clouds = _settings(shared("config_path", config_path), given)
    try:
        broker = broker_of(s.transport_url, password=os.environ.get(PASSWORD_ENV))
    except TransportURLError as exc:
        raise click.ClickException(f"collector.transport_url (--transport-url): {exc}") from None
    bus = BusSettings(
        broker_urls=broker.urls, broker=broker.display, pool=s.pool, topics=tuple(s.topics),
        service_exchanges=tuple(s.service_exchanges.items()), exchange_durable=s.amqp_durable_queues,
        exchange_auto_delete=s.amqp_auto_delete, durable=s.durable_queues, queue_type=s.queue_type, prefetch=s.prefetch,
        batch_size=s.batch_size, batch_timeout=s.batch_timeout, heartbeat=s.heartbeat,
        reconnect=Backoff(base=1.0, factor=2.0, max_delay=s.reconnect_max_delay), rebind_every=s.rebind_interval,
    )
    service = CollectorService(
        cloud=s.cloud, api_url=s.api_url, token=_token(s.token_file), buffer_dir=s.buffer_dir, bus=bus,
        metrics_host=s.metrics_host, metrics_port=s.metrics_port, drain_timeout=s.drain_timeout,
        max_buffered_events=s.max_buffered_events, max_buffered_bytes=s.max_buffered_bytes,
        max_bus_rejections=s.max_bus_rejections, max_rejected_bytes=s.max_rejected_bytes,
        buffer_reserve_bytes=s.buffer_reserve_bytes, volume_type_names=volume_type_names(clouds, s.cloud),
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from tally_pipeline.collector.errors import BufferUnusable
    from tally_pipeline.heap import settle_heap

    settle_heap(young_threshold=None)  # freeze only: each delivery leaves garbage cycles (heap.py)
    try:
        status = run(service, stop)
    except (OSError, ValueError, BufferUnusable) as exc:
        raise click.ClickException(str(exc)) from None
    raise SystemExit(status)


@click.command("collect")
@click.option("--messages", type=click.IntRange(min=100), default=100_000, show_default=True)
@click.option("--database", required=True, envvar="TALLY_DATABASE",
              help="Postgres URL for `tally serve` (migrated: `tally db migrate`); the run's events stay there "
                   "under a cloud of their own (bench-<run>).")
@click.option("--transport-url", default="rabbit://guest:guest@127.0.0.1:5672/", show_default=True,
              help="The broker to measure on; the run binds queues of its own on the service exchanges and "
                   "deletes them after.")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=500, show_default=True,
              help="The collector's batch (collector.batch_size).")
@click.option("--prefetch", type=click.IntRange(1, 65535), default=1000, show_default=True,
              help="The collector's and the baseline's prefetch (collector.prefetch).")
@click.option("--collectors", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Collector processes reading the same queues into one buffer directory, as a cloud's bus is "
                   "read on more than one core (docs/collector.md).")
@click.option("--oslo/--no-oslo", default=True, show_default=True,
              help="Also measure oslo.messaging's notification listener consuming the same messages.")
@click.option("--seed", type=int, default=1, show_default=True)
def bench_collect(messages: int, database: str, transport_url: str, batch_size: int, prefetch: int,
                  collectors: int, oslo: bool, seed: int) -> None:
    """Notifications per second end to end (oslo.messaging Notifier -> collector -> tally serve on Postgres ->
    stored) against merely consuming and acknowledging the same messages from the same broker; the
    collector's memory over the run."""

    from tqdm import tqdm

    from tally_pipeline.bench import collect
    from tally_pipeline.store import StoreError

    bars: dict[str, Any] = {}

    def progress(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=messages, desc=stage, unit="msg", leave=False)
        bars[stage].update(n)

    try:
        report = collect.run(database=database, transport_url=transport_url, messages=messages, seed=seed,
                             batch_size=batch_size, prefetch=prefetch, collectors=collectors, oslo=oslo,
                             progress=progress)
    except (StoreError, ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        for bar in bars.values():
            bar.close()
    if before := report["end_to_end"]["events_in_database_before"]:
        click.echo(f"note: the database held {before} events before this run (earlier runs' stay there); it stores "
                   "more slowly as they pile up, so compare figures taken on fresh databases", err=True)
    print_report(report)
