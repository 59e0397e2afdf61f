"""How Postgres finds a resource's events: through ``events_by_resource``, an index on a 64-bit hash
of the resource key (migration 0013), not on the key's text.

A query reaches that index only through the exact expression it was built on, so every reader
writes it here. Hashes may collide, so a reader matches the hash and then the key columns
themselves: collisions cost a row read, never a wrong answer.
"""

from __future__ import annotations

from tally_pipeline.store.projection_tables import Key


def resource_hash(cloud: str, resource_type: str, resource_id: str) -> str:
    """SQL: the indexed hash of the resource key given by three SQL expressions (columns or placeholders)."""
    return (f"hashtextextended(octet_length({cloud})::text || ':' || {cloud} "
            f"|| octet_length({resource_type})::text || ':' || {resource_type} || {resource_id}, 0)")


def same_resource(alias: str, key: str) -> str:
    """SQL: row ``alias`` of events belongs to the resource of row ``key`` (a table with the key columns)."""
    columns = ("cloud", "resource_type", "resource_id")
    return (f"{resource_hash(*(f'{alias}.{c}' for c in columns))} = {resource_hash(*(f'{key}.{c}' for c in columns))} "
            f"AND ({alias}.cloud, {alias}.resource_type, {alias}.resource_id) = ({key}.cloud, {key}.resource_type, "
            f"{key}.resource_id)")


def resource_filter(key: Key) -> tuple[str, list[str]]:
    """A WHERE clause selecting one resource's rows of events (columns unqualified), and its parameters.

    The key's hash is computed once, by the server (a sub-select), so the index scan gets it as a value.
    """
    columns = ("cloud", "resource_type", "resource_id")
    sql = (f"{resource_hash(*columns)} = (SELECT {resource_hash(*(f'k.{c}' for c in columns))} "
           "FROM (SELECT %s::text AS cloud, %s::text AS resource_type, %s::text AS resource_id) k) "
           "AND cloud = %s AND resource_type = %s AND resource_id = %s")
    return sql, [*key, *key]
