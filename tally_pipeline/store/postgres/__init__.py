"""The Postgres backend: the production store, its projection tables and its SQL fold."""
