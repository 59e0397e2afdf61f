"""The DuckDB backend: the embedded default store, its projection tables and its SQL fold."""
