"""The options every command shares: ``--config``/``--database`` turned into a Runtime, and sub-groups
that several areas add commands to. Kept apart from ``cli`` so the commands never import the CLI root."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tally_pipeline.config import ConfigError
from tally_pipeline.core.registry import RegistryError
from tally_pipeline.redaction import redact
from tally_pipeline.runtime import Runtime
from tally_pipeline.store import StoreError


def with_runtime(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` and ``--database`` to a command and pass it a ``Runtime`` as ``rt``.

    Configuration and store errors become one clear line on stderr and exit status 2.
    """

    @click.option(
        "--config",
        "config_path",
        envvar="TALLY_CONFIG",
        type=click.Path(dir_okay=False),
        help="Configuration file (YAML). Default: $TALLY_CONFIG, else the embedded default.",
    )
    @click.option("--database", envvar="TALLY_DATABASE",
                  help="Database URL (duckdb://PATH or postgresql://…); overrides the config file. Default: $TALLY_DATABASE.")
    @functools.wraps(command)
    def wrapper(*args: Any, config_path: str | None, database: str | None, **kwargs: Any) -> Any:
        try:
            rt = Runtime.load(config_path, database=database)
        except (ConfigError, RegistryError) as exc:
            raise click.ClickException(str(exc)) from None
        try:
            return command(*args, rt=rt, **kwargs)
        except (StoreError, RegistryError) as exc:
            # A store error may quote the database URL (the missing-migrations error does): no password.
            raise click.ClickException(redact(str(exc))) from None
        finally:
            rt.close()

    return wrapper
