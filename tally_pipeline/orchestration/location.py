"""The code location's settings: which tally config file and database it describes, and which clouds.

``definitions.py`` builds the location from one of these: the environment's in production
(``TALLY_CONFIG``, ``TALLY_DATABASE``, read where each run or sensor tick executes), or the arguments
of ``build_definitions`` (tests, the demo). Each process reads a config file through
``runtimes.runtime_for`` (again when it changes).
"""

from __future__ import annotations

import os
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
