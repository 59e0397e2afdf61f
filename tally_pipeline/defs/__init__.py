"""Dagster wiring only, discovered by ``dg.load_from_defs_folder``: one folder per domain with its
assets, jobs, schedules, sensors and checks. What they share and is not a definition lives in
``tally_pipeline/orchestration``."""

import warnings

import dagster as dg

# STYLE: time-partitioned assets use BackfillPolicy.single_run(), which Dagster 1.13 still marks beta.
# The choice is deliberate; the warning would greet every `dagster dev` without telling anyone anything.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=dg.BetaWarning)
# The catalog links each asset to its source (definitions.py, with_source_code_references), which
# Dagster 1.13 also marks beta: the same reasoning.
warnings.filterwarnings("ignore", message=r"(Function `with_source_code_references`|Class `LocalFileCodeReference`|"
                                          r"Class `CodeReferencesMetadataValue`)", category=dg.BetaWarning)
