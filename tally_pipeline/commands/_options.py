"""The options every command shares: ``--config``/``--database`` turned into a Runtime, and sub-groups
that several areas add commands to. Kept apart from ``cli`` so the commands never import the CLI root."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from tally_pipeline.core.errors import TallyError
from tally_pipeline.redaction import redact
from tally_pipeline.runtime import Runtime


def refusal(exc: TallyError) -> click.ClickException:
    """A ``TallyError`` as the command line shows it: ``Error: <message>`` on one line of stderr, exit
    status 1, no traceback (click's own refusals of an option's value keep exit status 2).

    Redacted, since a message may quote the database URL (the missing-migrations error does); a
    message of several lines (a validation report) is joined into one.
    """
    lines = [line.strip() for line in redact(str(exc)).splitlines()]
    return click.ClickException("; ".join(line for line in lines if line) or type(exc).__name__)


class TallyGroup(click.Group):
    """The ``tally`` group: any ``TallyError`` a command lets through is printed as ``refusal`` says,
    whichever command (and sub-group) raised it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TallyError as exc:
            raise refusal(exc) from None


def shared(name: str, own: Any) -> Any:
    """The value of a shared option (``config_path``, ``database``): the command's own when given on its
    command line, else the one given before the command (``tally --database URL db migrate``), else the
    command's own from its environment variable or default."""
    ctx = click.get_current_context()
    if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
        return own
    root = ctx.find_root()
    if root is not ctx and root.get_parameter_source(name) == ParameterSource.COMMANDLINE:
        return root.params.get(name)
    return own


def global_options(group: Callable[..., Any]) -> Callable[..., Any]:
    """``--config`` and ``--database`` on the ``tally`` group itself, for every command that reads them."""
    group = click.option("--database", help="Database URL for the command (as its own --database; the command's "
                                            "own, if given too, wins).")(group)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        help="Configuration file (YAML) for the command (as its own --config).")(group)


def with_runtime(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` and ``--database`` to a command and pass it a ``Runtime`` as ``rt`` (given before
    the command, on the ``tally`` group, they apply too: ``shared``).

    A ``TallyError`` (a configuration, a store error…) becomes one clear line on stderr and exit
    status 1 (``refusal``), also when the command is invoked on its own rather than through ``tally``.
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
        config_path, database = shared("config_path", config_path), shared("database", database)
        try:
            rt = Runtime.load(config_path, database=database)
        except TallyError as exc:
            raise refusal(exc) from None
        try:
            return command(*args, rt=rt, **kwargs)
        except TallyError as exc:
            raise refusal(exc) from None
        finally:
            rt.close()

    return wrapper
