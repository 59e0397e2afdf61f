"""The code location's settings: which tally config file and database it describes, and which clouds.

Dagster discovers ``defs/`` by importing it, so a definitions function there cannot be handed
arguments. ``build_definitions`` (tests, the demo) states them for the duration of one load with
``describing``; without it, the environment decides, as in production (``TALLY_CONFIG``,
``TALLY_DATABASE``). Each process reads a config file through ``runtimes.runtime_for`` (again when it changes).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from tally_pipeline.config import TallyConfig
from tally_pipeline.orchestration.runtimes import runtime_for

DATABASE_ENV = "TALLY_DATABASE"


def env_setting(name: str) -> str | None:
    """An environment variable's value; unset and empty are the same: not given."""
    return os.environ.get(name) or None


@dataclass(frozen=True)
class Location:
    """``config_path`` None: ``$TALLY_CONFIG``. ``database`` None: the config file's. ``clouds`` None: the
    config file's. ``from_environment``: production's, whose resources read the environment where they run."""

    config_path: str | None = None
    database: str | None = None
    clouds: tuple[str, ...] | None = None
    from_environment: bool = False

    @classmethod
    def environment(cls) -> Location:
        return cls(database=env_setting(DATABASE_ENV), from_environment=True)

    @property
    def config(self) -> TallyConfig:
        return runtime_for(self.config_path, self.database).config

    def cloud_names(self) -> list[str]:
        return sorted(self.clouds) if self.clouds is not None else self.config.cloud_names()


_described: ContextVar[Location | None] = ContextVar("tally_location", default=None)


def current() -> Location:
    """The location being built: the one ``describing`` names, else the environment's."""
    return _described.get() or Location.environment()


@contextmanager
def describing(location: Location) -> Iterator[None]:
    token = _described.set(location)
    try:
        yield
    finally:
        _described.reset(token)
