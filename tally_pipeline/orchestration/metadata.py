"""Materialization metadata shared by the assets."""

from typing import Any

import dagster as dg


def md_table(header: list[str], rows: list[list[Any]]) -> dg.MetadataValue:
    """A markdown table for the UI's metadata panel."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))
