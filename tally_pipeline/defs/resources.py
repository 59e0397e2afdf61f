"""The production resources: from the environment, unless the location being built names its config."""

import dagster as dg

from tally_pipeline.orchestration import location
from tally_pipeline.orchestration.resources import default_resources, environment_resources


@dg.definitions
def resources() -> dg.Definitions:
    described = location.current()
    if described.from_environment:
        return dg.Definitions(resources=environment_resources())
    return dg.Definitions(resources=default_resources(described.config_path, described.database))
