"""Pure domain rules: no database, no HTTP, no Dagster. Everything here is a function of its arguments."""
