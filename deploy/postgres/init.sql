-- Two databases on one server: the tally tables and Dagster's own storage. Passwords come from the
-- compose environment (POSTGRES_PASSWORD is the superuser's); change them for anything real.
CREATE ROLE tally LOGIN PASSWORD 'tally';
CREATE DATABASE tally OWNER tally;
CREATE ROLE dagster LOGIN PASSWORD 'dagster';
CREATE DATABASE dagster OWNER dagster;
-- Analysts read the asset tables with a role that can write nothing.
CREATE ROLE analyst LOGIN PASSWORD 'analyst';
\connect tally
ALTER DEFAULT PRIVILEGES FOR ROLE tally IN SCHEMA public GRANT SELECT ON TABLES TO analyst;
GRANT USAGE ON SCHEMA public TO analyst;
