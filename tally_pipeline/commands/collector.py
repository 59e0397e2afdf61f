"""``tally collector …``: look at a collector's on-disk buffer, drain it, inspect and requeue its rejected log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

BUFFER_DIR = click.option(
    "--buffer-dir",
    required=True,
    envvar="TALLY_COLLECTOR_BUFFER_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="The collector's buffer directory (default: $TALLY_COLLECTOR_BUFFER_DIR).",
)
AS_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def _existing(buffer_dir: Path) -> Path:
    from tally_pipeline.collector.buffer import DB_NAME

    if not (buffer_dir / DB_NAME).exists():
        raise click.ClickException(f"no collector buffer at {buffer_dir} ({DB_NAME} not found)")
    return buffer_dir


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _age(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _rejected_entry(r: Any) -> dict[str, Any]:
    """One row of the rejected log: an event (origin api or local), or a bus message as received (origin
    bus: ``raw``, which need not be JSON; ``event_id`` is then the notification's message_id)."""
    entry = {"event_id": r.event_id, "reason": r.reason, "message": r.message, "origin": r.origin,
             "rejected_at": r.rejected_at, "attempts": r.attempts}
    if r.origin == "bus":
        entry["raw"] = r.body  # an excerpt of the message; its whole size and SHA-256 beside it
        entry["size"] = r.size
        entry["sha256"] = r.digest
    else:
        entry["event"] = json.loads(r.body)
    return entry


@click.group()
def collector() -> None:
    """The collector client's on-disk buffer."""


@collector.command("status")
@BUFFER_DIR
@AS_JSON
def status(buffer_dir: Path, as_json: bool) -> None:
    """Buffered events, the oldest one's age, the rejected log and the last send attempt."""
    from tally_pipeline.collector.buffer import buffer_status
    from tally_pipeline.core.timeutil import format_rfc3339

    s = buffer_status(_existing(buffer_dir))
    if as_json:
        click.echo(json.dumps(s.as_json(), indent=2))
        return
    lines = [
        ("buffer", s.path),
        ("buffered", f"{s.buffered} events ({_size(s.buffered_bytes)}), {s.claimed} in a request in flight"),
    ]
    if s.oldest_enqueued_at is not None and s.oldest_age is not None:
        from datetime import UTC, datetime

        when = format_rfc3339(datetime.fromtimestamp(s.oldest_enqueued_at, UTC))
        lines.append(("oldest", f"{_age(s.oldest_age)} old (enqueued {when}), most attempts {s.max_attempts}"))
    reasons = ", ".join(f"{reason} {n}" for reason, n in s.top_reasons)
    lines.append(("rejected", f"{s.rejected}" + (f" ({reasons})" if reasons else "")))
    sender = s.sender
    if "last_attempt_at" in sender:
        status_code = sender.get("last_http_status")
        lines.append(("last attempt", f"{sender['last_attempt_at']}: {sender.get('last_outcome', '?')}"
                      + (f" (HTTP {status_code})" if status_code else "")))
    if "last_success_at" in sender:
        lines.append(("last success", sender["last_success_at"]))
    if "last_error" in sender:
        lines.append(("last error", f"{sender.get('last_error_at', '?')}: {sender['last_error']}"))
    failures = sender.get("consecutive_failures")
    if failures and failures != "0":
        lines.append(("failing", f"{failures} failed attempts in a row"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key.ljust(width)}  {value}")


@collector.command("drain")
@BUFFER_DIR
@click.option("--url", required=True, envvar="TALLY_COLLECTOR_URL", help="The ingest API's base URL.")
@click.option("--token", envvar="TALLY_COLLECTOR_TOKEN", help="Bearer token (default: $TALLY_COLLECTOR_TOKEN).")
@click.option("--retry-for", type=float, default=0.0, show_default=True,
              help="Keep retrying with backoff for this many seconds while the API is unavailable.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=1000, show_default=True)
@click.option("--timeout", type=float, default=30.0, show_default=True, help="HTTP timeout per request (s).")
@AS_JSON
def drain(buffer_dir: Path, url: str, token: str | None, retry_for: float, batch_size: int,
          timeout: float, as_json: bool) -> None:
    """Send everything buffered now; exit 1 if anything is left."""
    from tally_pipeline.collector import Collector, CollectorAuthError

    _existing(buffer_dir)
    with Collector(url, token, buffer_dir, batch_size=batch_size, timeout=timeout) as c:
        try:
            report = c.drain(retry_for=retry_for)
        except CollectorAuthError as exc:
            raise click.ClickException(str(exc)) from None
    summary: dict[str, Any] = {
        "requests": report.requests, "stored": report.stored, "duplicates": report.duplicates,
        "conflicts": report.conflicts, "rejected": report.rejected,
        "rejected_locally": report.rejected_locally, "remaining": report.remaining,
        "outcome": report.outcome, "error": report.error if report.remaining else None,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"sent in {report.requests} requests: {report.stored} stored, {report.duplicates} duplicates, "
            f"{report.rejected + report.rejected_locally} rejected; {report.remaining} remain buffered"
        )
    if report.remaining:
        raise click.ClickException(f"{report.remaining} events remain buffered: {report.error or report.outcome}")


@collector.command("rejected")
@BUFFER_DIR
@click.option("--reason", help="Only this reason code.")
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True)
@AS_JSON
def rejected(buffer_dir: Path, reason: str | None, limit: int, as_json: bool) -> None:
    """The local rejected log, newest first: events the API or the collector refused, and bus messages
    that are no event (origin ``bus``, kept as received)."""
    from tally_pipeline.collector.buffer import DiskBuffer

    buf = DiskBuffer(_existing(buffer_dir))
    try:
        items = buf.rejected(reason=reason, limit=limit)
    finally:
        buf.close()
    if as_json:
        click.echo(json.dumps([_rejected_entry(r) for r in items], indent=2))
        return
    for r in items:
        click.echo(f"{r.event_id}\t{r.reason}\t{r.origin}\t{r.message or ''}")


@collector.command("requeue")
@BUFFER_DIR
@click.option("--reason", help="Only rejections with this reason code (default: all).")
def requeue(buffer_dir: Path, reason: str | None) -> None:
    """Move rejected events back into the buffer, e.g. after the API learned a new resource type
    (bus messages stay: they are no event)."""
    from tally_pipeline.collector.buffer import DiskBuffer
    from tally_pipeline.collector.errors import BufferFull

    buf = DiskBuffer(_existing(buffer_dir))
    try:
        moved = buf.requeue_rejected(reason=reason, now=time.time())
    except BufferFull as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        buf.close()
    click.echo(f"requeued {moved} events")
