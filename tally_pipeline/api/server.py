"""Building the API from a configuration, and serving it with uvicorn."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import TokenBook, is_loopback
from tally_pipeline.runtime import Runtime


class ServeRefused(RuntimeError):
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


# ``tally serve --workers N`` hands uvicorn an import string; each worker process builds its app
# from these variables, set by the parent before it starts them.
ENV_CONFIG, ENV_DATABASE, ENV_TOKENS = "TALLY_SERVE_CONFIG", "TALLY_SERVE_DATABASE", "TALLY_SERVE_TOKENS"


def app_from_env() -> Starlette:
    """The app for one uvicorn worker process (see ``tally serve --workers``)."""
    import os

    rt = Runtime.load(os.environ.get(ENV_CONFIG) or None, database=os.environ.get(ENV_DATABASE) or None)
    tokens = os.environ.get(ENV_TOKENS) or None
    return build_app(rt, tokens_file=Path(tokens) if tokens else None)
