"""The API's shared vocabulary: JSON answers, the error shape, the request context, auth checks and
query-parameter parsing. Route modules import from here; ``app.py`` assembles them."""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from tally_pipeline.api.auth import ANONYMOUS_LOCAL, Principal, TokenBook
from tally_pipeline.api.metrics import ApiMetrics
from tally_pipeline.api.quota import DEFAULT_PER_MINUTE, DeadLetterQuota
from tally_pipeline.core.errors import InputError
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store.base import Store

if TYPE_CHECKING:
    from tally_pipeline.services.reconciliation_launch import SyncLauncher

DEFAULT_MAX_BODY = 5 * 1024 * 1024


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, default=_json_default, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC)
        except orjson.JSONEncodeError:
            # PostgreSQL's jsonb keeps numbers as numeric and hands 1e300 back as a 301-digit integer,
            # which orjson cannot write; the standard library can (the same number, spelled out).
            return json.dumps(content, default=_json_default, ensure_ascii=False, separators=(",", ":")).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def error(status: int, code: str, detail: str | None = None, **extra: Any) -> JSON:
    body: dict[str, Any] = {"error": code}
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSON(body, status_code=status, headers=headers)


@dataclass
class ApiContext:
    """Everything the handlers use; built by ``tally serve`` or by a test."""

    store: Store
    ingestor: Ingestor
    tokens: TokenBook | None = None  # None: no tokens file, anonymous loopback use only
    max_body_bytes: int = DEFAULT_MAX_BODY
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    runtime: Any = None  # the Runtime, for calls that need the configuration (a sync)
    dead_letter_quota: DeadLetterQuota | None = None  # None: from the runtime's configuration (or the default)
    syncs: SyncLauncher | None = None  # the SyncLauncher of POST /internal/sync/{cloud}; None: built from the runtime when first used
    parse_workers: int = 2  # bodies parsed at once, each in a worker thread (the rest wait their turn there)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # "now" of the usage readings
    parse_slots: threading.BoundedSemaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.parse_slots = threading.BoundedSemaphore(self.parse_workers)
        if self.dead_letter_quota is None:
            per_minute = DEFAULT_PER_MINUTE
            if self.runtime is not None:
                per_minute = self.runtime.config.dead_letter.max_bytes_per_minute
            self.dead_letter_quota = DeadLetterQuota(per_minute)


class ApiError(InputError):
    def __init__(self, response: JSON):
        self.response = response


def principal_of(ctx: ApiContext, request: Request) -> Principal:
    if ctx.tokens is None:
        return ANONYMOUS_LOCAL
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(error(401, "unauthorized", "missing bearer token (Authorization: Bearer TOKEN)"))
    principal = ctx.tokens.authenticate(token.strip())
    if principal is None:
        raise ApiError(error(401, "unauthorized", "unknown token"))
    return principal


def metric_clouds(ctx: ApiContext, principal: Principal) -> frozenset[str]:
    """The clouds ``/metrics`` may name for this caller's items: the known ones and those its token names."""
    return known_clouds(ctx) | principal.named_clouds()


def known_clouds(ctx: ApiContext) -> frozenset[str]:
    """The configured clouds and those ``alerts.clouds`` names: the only ones ``/metrics`` reads from the
    store under their own name (every other stored cloud is counted as ``other``)."""
    if ctx.runtime is None:
        return frozenset()
    config = ctx.runtime.config
    return frozenset(config.clouds) | frozenset(config.alerts.clouds)


def require(principal: Principal, scope: str) -> None:
    if not principal.has(scope):
        raise ApiError(error(403, "forbidden", f"this token lacks the {scope!r} scope"))


def encode_cursor(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def decode_cursor(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued")) from None
    if not isinstance(value, dict):
        raise ApiError(error(400, "invalid_cursor", "cursor is not one this API issued"))
    return value


def query_limit(request: Request, default: int = 100, maximum: int = 1000) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return default
    # str.isdigit() also holds for "²" and "٥" (int() reads the latter as 5 and fails on the former):
    # only ASCII digits make a limit, and no more of them than the maximum has, so a 4,301-digit value
    # is refused before int() would parse it.
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(maximum))) or not 1 <= int(text) <= maximum:
        raise ApiError(error(400, "invalid_parameter", f"limit must be an integer from 1 to {maximum}"))
    return int(text)


def checked_text(value: str, name: str) -> str:
    """A query or path parameter bound into SQL: PostgreSQL text cannot hold NUL, and nothing stored does."""
    if "\x00" in value:
        raise ApiError(error(400, "invalid_parameter", f"{name} must not contain the NUL character"))
    return value


def query_text(request: Request, name: str) -> str | None:
    """A text filter; absent or empty means no filter."""
    value = request.query_params.get(name)
    return checked_text(value, name) if value else None


def query_instant(request: Request, name: str) -> datetime | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        return parse_rfc3339(text)
    except TimestampError as exc:
        raise ApiError(error(400, "invalid_parameter", f"{name}: {exc}")) from None
