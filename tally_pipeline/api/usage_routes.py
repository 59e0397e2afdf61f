"""``GET /v1/usage``: the ledger's usage per cloud, project, meter and period, posted and (on request)
provisional; ``GET /v1/statements/{cloud}/{month}``: a month's statement; as JSON or CSV (docs/api.md)."""

from __future__ import annotations

import csv
import io
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tally_pipeline.api.http import (
    JSON,
    ApiContext,
    ApiError,
    checked_text,
    decode_cursor,
    encode_cursor,
    error,
    principal_of,
    query_instant,
    query_limit,
    query_text,
)
from tally_pipeline.config import LedgerSettings
from tally_pipeline.core.statements import parse_month
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.core.usage import to_units
from tally_pipeline.services.statements import read_statement
from tally_pipeline.services.usage import GROUPS, RowKey, UsagePage, UsageRow, current_usage, quantity, usage_page
from tally_pipeline.store.ledger_reads import Group, Scope

CSV_TYPE = "text/csv"
CSV_COLUMNS = ("cloud", "project_id", "meter", "period", "account", "quantity", "unit", "provisional", "posted_to")


def _bad(detail: str) -> ApiError:
    return ApiError(error(400, "invalid_parameter", detail))


def _readable(ctx: ApiContext, request: Request, cloud: str | None) -> frozenset[str] | None:
    """The clouds this caller may read (None: every one), narrowed to ``cloud`` when given."""
    readable = principal_of(ctx, request).readable_clouds()
    if readable is not None and not readable:
        raise ApiError(error(403, "forbidden", "this token lacks the 'read' scope (or 'read:<cloud>')"))
    if cloud is None:
        return readable
    if readable is not None and cloud not in readable:
        raise ApiError(error(403, "forbidden", f"this token may not read cloud {cloud!r}"))
    return frozenset({cloud})


def _scope(ctx: ApiContext, request: Request) -> Scope:
    """The filters, narrowed to the clouds the caller's token may read."""
    clouds = _readable(ctx, request, query_text(request, "cloud"))
    return Scope(clouds, query_text(request, "project_id"), query_text(request, "meter"))


def _settings(ctx: ApiContext) -> LedgerSettings:
    return ctx.runtime.config.ledger if ctx.runtime is not None else LedgerSettings()


def _group(request: Request) -> Group:
    value = request.query_params.get("group") or "none"
    for group in GROUPS:
        if value == group:
            return group
    raise _bad(f"group must be one of {', '.join(GROUPS)}, not {value!r}")


def _after(request: Request, group: Group) -> RowKey | None:
    text = request.query_params.get("cursor")
    if not text:
        return None
    value = decode_cursor(text)
    after, issued_for = value.get("after"), value.get("group")
    if not (
        isinstance(after, list)
        and len(after) == 6
        and all(isinstance(v, str) and "\x00" not in v for v in after[:5])
        and after[5] in (0, 1)
        and not isinstance(after[5], bool)
    ):
        raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued"))
    if issued_for != group:
        raise ApiError(error(400, "invalid_cursor", f"cursor was issued for group={issued_for}, not group={group}"))
    return (after[0], after[1], after[2], after[3], after[4], after[5])


def wants_csv(request: Request) -> bool:
    """``Accept`` names ``text/csv`` before (or without) any JSON type: CSV; anything else: JSON."""
    for part in request.headers.get("accept", "").split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media == CSV_TYPE:
            return True
        if media in ("application/json", "application/*", "*/*"):
            return False
    return False


async def get_usage(ctx: ApiContext, request: Request) -> Response:
    scope = _scope(ctx, request)
    start, end = query_instant(request, "from"), query_instant(request, "to")
    if start is not None and end is not None and start >= end:
        raise _bad(f"from ({format_rfc3339(start)}) must be before to ({format_rfc3339(end)})")
    group = _group(request)
    include = request.query_params.get("include") or None
    if include not in (None, "pending"):
        raise _bad(f"include must be 'pending' (or absent), not {include!r}")
    limit = query_limit(request)
    after = _after(request, group)
    settings = _settings(ctx)
    page = await run_in_threadpool(
        lambda: usage_page(
            ctx.store, ctx.ingestor.registry, now=ctx.clock(), ingest_lag=settings.ingest_lag,
            window_days=settings.window_days, scope=scope, group=group, start=start, end=end,
            include_pending=include == "pending", after=after, limit=limit,
        )
    )
    next_cursor = None if page.next_key is None else encode_cursor({"after": list(page.next_key), "group": group})
    headers = {"Tally-As-Of": format_rfc3339(page.as_of)}
    if page.posted_to is not None:
        headers["Tally-Posted-To"] = format_rfc3339(page.posted_to)
    if next_cursor is not None:
        headers["Tally-Next-Cursor"] = next_cursor
    if wants_csv(request):
        return Response(_csv(page), media_type=CSV_TYPE, headers=headers)
    return JSON(
        {
            "as_of": page.as_of,
            "posted_to": page.posted_to,
            "group": group,
            "from": start,
            "to": end,
            "usage": [_row(r) for r in page.rows],
            "next_cursor": next_cursor,
        },
        headers=headers,
    )


def _row(row: UsageRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cloud": row.cloud,
        "project_id": row.project_id,
        "meter": row.meter,
        "period": row.period or None,
        "account": row.account,
        "quantity": quantity(row),
        "unit": row.unit,
        "provisional": row.provisional,
    }
    if row.provisional:
        out["posted_to"] = row.posted_to
    return out


def _csv(page: UsagePage) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for r in page.rows:
        since = format_rfc3339(r.posted_to) if r.posted_to is not None else ""
        writer.writerow([r.cloud, r.project_id, r.meter, r.period, r.account, quantity(r), r.unit,
                         "true" if r.provisional else "false", since])
    return out.getvalue()


async def get_current_usage(ctx: ApiContext, request: Request) -> Response:
    """A project's live balance: this month (UTC, of ``as_of``) to now, posted plus pending."""
    cloud = checked_text(request.path_params["cloud"], "cloud")
    project_id = checked_text(request.path_params["project_id"], "project_id")
    _readable(ctx, request, cloud)
    settings = _settings(ctx)
    current = await run_in_threadpool(
        lambda: current_usage(ctx.store, ctx.ingestor.registry, now=ctx.clock(), ingest_lag=settings.ingest_lag,
                              window_days=settings.window_days, cloud=cloud, project_id=project_id)
    )
    return JSON(
        {
            "cloud": current.cloud,
            "project_id": current.project_id,
            "month": current.month_start.strftime("%Y-%m"),
            "from": current.month_start,
            "as_of": current.as_of,
            "posted_to": current.posted_to,
            "balances": [
                {"meter": b.meter, "account": b.account, "unit": b.unit, "posted": str(to_units(b.posted)),
                 "pending": str(to_units(b.pending)), "total": str(to_units(b.total))}
                for b in current.balances
            ],
        }
    )


STATEMENT_COLUMNS = ("cloud", "month", "project_id", "meter", "version", "quantity", "unit", "previous_quantity",
                     "difference", "stated_at")


async def get_statement(ctx: ApiContext, request: Request) -> Response:
    """A month's statement of a cloud: each entity's latest version (``versions=all``: every version)."""
    cloud = checked_text(request.path_params["cloud"], "cloud")
    try:
        month = parse_month(request.path_params["month"])
    except ValueError as exc:
        raise _bad(str(exc)) from None
    _readable(ctx, request, cloud)
    versions = request.query_params.get("versions") or "latest"
    if versions not in ("latest", "all"):
        raise _bad(f"versions must be 'latest' or 'all', not {versions!r}")
    project_id = query_text(request, "project_id")
    statement = await run_in_threadpool(
        lambda: read_statement(ctx.store, cloud, month, project_id=project_id, versions=versions == "all"))
    document = statement.to_dict()
    if wants_csv(request):
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(STATEMENT_COLUMNS)
        for line in document["statements"]:
            writer.writerow([cloud, document["month"], *(("" if line[c] is None else line[c]) for c in STATEMENT_COLUMNS[2:])])
        headers = {"Tally-Stated": "true" if document["stated"] else "false"}
        return Response(out.getvalue(), media_type=CSV_TYPE, headers=headers)
    return JSON(document)
