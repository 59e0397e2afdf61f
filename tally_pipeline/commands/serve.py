"""``tally serve``: the ingest and query API."""

from __future__ import annotations

from pathlib import Path

import click

from tally_pipeline.api.auth import TokensFileError
from tally_pipeline.api.server import ServeRefused, build_app, check_bind
from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime


@click.command("serve")
@click.option("--host", default=None, help="Address to bind (default: api.host from the config, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default: api.port from the config, 8080).")
@click.option("--tokens-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="YAML tokens file (overrides tokens_file in the config).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="uvicorn worker processes (Postgres only: a DuckDB file admits one process at a time).")
@click.option("--log-level", default="info", show_default=True)
@with_runtime
def serve(rt: Runtime, host: str | None, port: int | None, tokens_file: Path | None, workers: int,
          log_level: str) -> None:
    """Serve the HTTP API (POST /v1/events, queries, /healthz, /metrics) with uvicorn."""
    import os
    import shutil
    import tempfile

    import uvicorn

    from tally_pipeline.api.metrics import MULTIPROC_ENV
    from tally_pipeline.api.server import ENV_CONFIG, ENV_DATABASE, ENV_TOKENS, uvicorn_options
    from tally_pipeline.heap import settle_heap
    from tally_pipeline.redaction import redact

    host = host or rt.config.api.host
    port = rt.config.api.port if port is None else port
    tokens_path = tokens_file or rt.config.tokens_file
    try:
        check_bind(host, tokens_path)
        app = build_app(rt, tokens_file=tokens_path)
    except (ServeRefused, TokensFileError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"tally API on http://{host}:{port} ({rt.store.dialect}: {redact(rt.store.url)})", err=True)
    options = uvicorn_options(rt.config.api, log_level)
    if workers == 1:
        settle_heap()
        uvicorn.run(app, host=host, port=port, **options)
        return
    if rt.store.dialect != "postgres":
        raise click.ClickException("--workers above 1 needs Postgres: an embedded DuckDB file admits one process")
    ctx = click.get_current_context()
    os.environ[ENV_CONFIG] = ctx.params.get("config_path") or os.environ.get("TALLY_CONFIG", "")
    os.environ[ENV_DATABASE] = rt.config.database
    os.environ[ENV_TOKENS] = str(tokens_path or "")
    rt.close()
    # Every worker writes its counters into one folder and every scrape adds them all up
    # (prometheus_client's multiprocess mode): a fresh folder per server unless the operator names one.
    own_dir = None
    if not os.environ.get(MULTIPROC_ENV):
        own_dir = tempfile.mkdtemp(prefix="tally-metrics-")
        os.environ[MULTIPROC_ENV] = own_dir
    try:
        uvicorn.run("tally_pipeline.api.server:app_from_env", factory=True, workers=workers, host=host, port=port,
                    **options)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
