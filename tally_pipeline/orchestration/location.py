"""The code location's settings: which tally config file and database it describes, and which clouds.

``definitions.py`` builds the location from one of these: the environment's in production
(``TALLY_CONFIG``, ``TALLY_DATABASE``, read where each run or sensor tick executes), or the arguments
of ``build_definitions`` (tests, the demo). The location reads the config file once, when it loads;
the resources read it again where each run and sensor tick executes, so only the location's shape
(its clouds, the daily partitions' first day) needs a reload: ``config_changes`` says when the clouds
are out of date.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from tally_pipeline.config import TallyConfig, load_config

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

    @cached_property
    def config(self) -> TallyConfig:
        # isolate_clouds: a bad cloud entry leaves the location loading, that cloud set aside with its reason
        return load_config(self.config_path, database=self.database, isolate_clouds=True)

    def cloud_names(self) -> list[str]:
        return sorted(self.clouds) if self.clouds is not None else self.config.cloud_names()


def config_changes(config: TallyConfig, loaded_clouds: list[str]) -> str | None:
    """What ``config``'s clouds (the file as it is now) differ from the clouds the code location was loaded
    with, as one line; None when they agree. Only a reload of the code location applies such a change."""
    current = set(config.cloud_names())
    added, removed = sorted(current - set(loaded_clouds)), sorted(set(loaded_clouds) - current)
    if not added and not removed:
        return None
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
    return ("config changed: clouds " + "; ".join(parts)
            + " — reload the code location (Deployment → Reload) to schedule and sync them")
