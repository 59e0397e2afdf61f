"""Building the API from a configuration, and serving it with uvicorn."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from tally_pipeline.api.app import create_app
from tally_pipeline.api.auth import TokenBook, is_loopback
from tally_pipeline.api.connections import BoundedHttpProtocol, ConnectionLimits
from tally_pipeline.api.http import ApiContext
from tally_pipeline.config import ApiSettings
from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.heap import settle_heap
from tally_pipeline.runtime import Runtime


class ServeRefused(ConfigurationError, RuntimeError):
    pass


def build_app(rt: Runtime, *, tokens_file: Path | None = None) -> Starlette:
    tokens_path = tokens_file or rt.config.tokens_file
    tokens = TokenBook.load(tokens_path) if tokens_path is not None else None
    rt.store.require_current_schema()
    ctx = ApiContext(
        store=rt.store,
        ingestor=rt.ingestor,
        tokens=tokens,
        max_body_bytes=rt.config.api.max_body_bytes,
        runtime=rt,
    )
    return create_app(ctx)


def check_bind(host: str, tokens_path: Path | None) -> None:
    """Without tokens every caller is trusted, so only loopback may be bound."""
    if tokens_path is None and not is_loopback(host):
        raise ServeRefused(
            f"refusing to listen on {host}: without a tokens file the API accepts anonymous writes, "
            "which is allowed only on a loopback address. Give --tokens-file (or tokens_file in the "
            "config) or bind 127.0.0.1."
        )


def uvicorn_options(api: ApiSettings, log_level: str) -> dict[str, Any]:
    """The uvicorn settings ``tally serve`` runs with (see ``tally_pipeline.api.connections``)."""
    use_limits(api)
    return {
        "http": BoundedHttpProtocol,
        "ws": "none",  # the API has no websocket route: an upgrade request is an ordinary request
        "timeout_keep_alive": api.keep_alive_timeout,
        "limit_concurrency": api.max_connections,
        "log_config": log_config(log_level),
        "log_level": log_level,
        "access_log": False,
    }


def use_limits(api: ApiSettings) -> None:
    """Set this process's connection limits (uvicorn builds each connection's protocol itself)."""
    BoundedHttpProtocol.configure(ConnectionLimits(
        max_header_bytes=api.max_header_bytes,
        max_request_line_bytes=api.max_request_line_bytes,
        header_timeout=api.header_timeout,
        body_timeout=api.body_timeout,
        max_connections_per_client=api.max_connections_per_client,
    ))


def log_config(log_level: str) -> dict[str, Any]:
    """uvicorn's logging, with every handler redacting secrets and the API's own loggers at ``log_level``.

    The root logger gets uvicorn's handler too, so warnings of the driver and the pool pass the same
    filter instead of Python's unfiltered last-resort handler.
    """
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact": {"()": "tally_pipeline.redaction.RedactingFilter"}}
    for handler in config["handlers"].values():
        handler["filters"] = ["redact"]
    config["loggers"]["tally"] = {"level": log_level.upper()}
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
    return config


# ``tally serve --workers N`` hands uvicorn an import string; each worker process builds its app
# from these variables, set by the parent before it starts them.
ENV_CONFIG, ENV_DATABASE, ENV_TOKENS = "TALLY_SERVE_CONFIG", "TALLY_SERVE_DATABASE", "TALLY_SERVE_TOKENS"


def app_from_env() -> Starlette:
    """The app for one uvicorn worker process (see ``tally serve --workers``)."""
    import os

    rt = Runtime.load(os.environ.get(ENV_CONFIG) or None, database=os.environ.get(ENV_DATABASE) or None)
    use_limits(rt.config.api)
    tokens = os.environ.get(ENV_TOKENS) or None
    app = build_app(rt, tokens_file=Path(tokens) if tokens else None)
    settle_heap()
    return app
