"""The advisory lock ids the Postgres backend takes, in one place so that no two collide."""

from __future__ import annotations

MIGRATION_LOCK = 0x7A11_0001  # one migrator at a time

# Ingest holds this advisory lock shared until commit; a projection refresh takes it exclusively for
# an instant to learn a sequence value below which every event is committed.
INGEST_LOCK = 0x7A11_0002

PROJECTION_LOCK = 0x7A11_0003  # one refresh at a time
