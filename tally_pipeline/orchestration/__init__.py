"""What the Dagster definitions under ``tally_pipeline/defs`` share and are not definitions themselves:
the resources, the code location's settings, partitions, run tags, automation conditions, metadata
helpers and the catalog policy. Kept outside ``defs/`` so that discovery finds only definitions there.
"""
