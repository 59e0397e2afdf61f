#!/bin/sh
# Two databases on one server: the tally tables and Dagster's own storage, and a read-only role for
# analysts. Run once by the postgres image on an empty data directory; the passwords come from the
# environment compose gives it (deploy/.env, see deploy/env.example), passed to psql as variables so
# that none is written in this file or in a command line.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v tally_pw="$TALLY_DB_PASSWORD" -v dagster_pw="$DAGSTER_DB_PASSWORD" -v analyst_pw="$ANALYST_DB_PASSWORD" <<'SQL'
CREATE ROLE tally LOGIN PASSWORD :'tally_pw';
CREATE DATABASE tally OWNER tally;
CREATE ROLE dagster LOGIN PASSWORD :'dagster_pw';
CREATE DATABASE dagster OWNER dagster;
-- Analysts read the asset tables with a role that can write nothing.
CREATE ROLE analyst LOGIN PASSWORD :'analyst_pw';
\connect tally
ALTER DEFAULT PRIVILEGES FOR ROLE tally IN SCHEMA public GRANT SELECT ON TABLES TO analyst;
GRANT USAGE ON SCHEMA public TO analyst;
SQL
