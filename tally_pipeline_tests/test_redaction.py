"""Database passwords never printed: the start-up line (see test_serve_outage.py), the missing-migrations
error, configuration errors, store errors and every log line; and the shapes of secret the redactor knows."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.cli import main
from tally_pipeline.config import ConfigError, load_config
from tally_pipeline.redaction import RedactingFilter, redact, remember_url_password
from tally_pipeline.runtime import Runtime

PASSWORD = "Hunter2-very-secret"


@pytest.mark.parametrize("text,gone", [
    (f"postgresql://tally:{PASSWORD}@db:5432/tally", PASSWORD),
    (f"postgres://tally:{PASSWORD}@db/tally?sslmode=require", PASSWORD),
    ("postgresql://tally:p@ss/w0rd@db/tally", "p@ss/w0rd"),  # unencoded @ and / in the password
    (f'could not parse "postgresql://tally:{PASSWORD}@[db/tally"', PASSWORD),
    (f"host=db user=tally password={PASSWORD} dbname=tally", PASSWORD),
    (f"host=db password='{PASSWORD} with space' dbname=tally", PASSWORD),
    (f"postgresql://db/tally?user=tally&password={PASSWORD}&sslmode=require", PASSWORD),
    ("POST /v1/events HTTP/1.1\r\nAuthorization: Bearer abc.DEF-123_xyz\r\nHost: x\r\n", "abc.DEF-123_xyz"),
    ('{"note": "Bearer abc.DEF-123_xyz"}', "abc.DEF-123_xyz"),
])
def test_secrets_are_masked_by_shape(text: str, gone: str) -> None:
    clean = redact(text)
    assert gone not in clean and "***" in clean


def test_text_without_secrets_is_unchanged() -> None:
    for text in ("duckdb:///var/lib/tally/tally.duckdb", "postgresql://tally@db:5432/tally", "http://127.0.0.1:8080/healthz",
                 '{"events": [{"event_id": "e1"}]}', "database tally is missing migrations 0005"):
        assert redact(text) == text


def test_a_configured_password_is_masked_even_without_its_url() -> None:
    remember_url_password("postgresql://tally:Quoted%2Fpw-77@db/tally")
    assert redact('password authentication failed: "Quoted/pw-77"') == 'password authentication failed: "***"'
    assert "Quoted%2Fpw-77" not in redact("it was Quoted%2Fpw-77")


def test_log_lines_and_their_tracebacks_are_redacted() -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Collect()
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tally.test.redaction")
    logger.addHandler(handler)
    try:
        logger.warning("connecting to %s", f"postgresql://tally:{PASSWORD}@db/tally")
        try:
            raise RuntimeError(f"cannot open postgresql://tally:{PASSWORD}@db/tally")
        except RuntimeError:
            logger.exception("store failed")
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2 and "RuntimeError" in records[1]
    assert all(PASSWORD not in r for r in records) and all("***" in r for r in records)


def test_a_config_error_quoting_the_database_line_has_no_password(tmp_path: Path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: postgresql://tally:{PASSWORD}@db/tally: oops\n")
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    assert "line 1" in str(raised.value) and PASSWORD not in str(raised.value)
    result = CliRunner().invoke(main, ["db", "migrate", "--config", str(config)])
    assert result.exit_code != 0 and "mapping values" in result.output and PASSWORD not in result.output


def test_the_missing_migrations_error_has_no_password(pg_url: str) -> None:
    url = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")
    assert url != pg_url
    result = CliRunner().invoke(main, ["serve", "--database", url, "--port", "0"])
    assert result.exit_code != 0 and "tally db migrate" in result.output
    assert PASSWORD not in result.output and "postgres:***@" in result.output


@pytest.mark.slow
def test_a_store_error_and_the_pool_warnings_have_no_password() -> None:
    # libpq quotes a URI it cannot parse, password and all; the pool logs that on every attempt. A real
    # process: under pytest, log records go to pytest's handlers instead of the terminal.
    url = f"postgresql://tally:{PASSWORD}@[db/tally"
    done = subprocess.run([sys.executable, "-m", "tally_pipeline", "db", "migrate", "--database", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "PostgreSQL unavailable" in done.stderr
    # the pool's warning (once per outage, not per attempt) reaches the terminal, redacted
    assert "unreachable" in done.stderr and "error connecting" not in done.stderr, done.stderr
    assert PASSWORD not in done.stderr + done.stdout


def test_a_tokens_file_error_quotes_no_token(tmp_path: Path) -> None:
    from tally_pipeline.api.auth import TokenBook, TokensFileError

    path = tmp_path / "tokens.yaml"
    path.write_text("tokens:\n  - {token: a-very-secret-token-0001: x, scopes: [read]}\n")
    with pytest.raises(TokensFileError) as raised:
        TokenBook.load(path)
    assert "line 2" in str(raised.value) and "a-very-secret-token" not in str(raised.value)


def test_the_api_answers_store_errors_without_the_password(caplog: pytest.LogCaptureFixture) -> None:
    from tally_pipeline.store.postgres.store import PostgresStore

    url = f"postgresql://tally:{PASSWORD}@[db/tally"
    rt = Runtime.load(None, database=url)
    store = PostgresStore(url, timeout=1.0)
    rt._store = store
    try:
        client = TestClient(create_app(ApiContext(store=store, ingestor=rt.ingestor, runtime=rt)))
        with caplog.at_level(logging.WARNING):
            for path in ("/healthz", "/v1/inventory"):
                response = client.get(path)
                assert response.status_code == 503
                assert PASSWORD not in response.text
        assert "store unavailable" in caplog.text
    finally:
        rt.close()


def test_a_body_made_of_credentials_is_cut_past_the_mask_limit() -> None:
    from tally_pipeline.redaction import MAX_MASKS, mask_credentials

    body = "".join(f"Bearer tok{i:07d} " for i in range(200_000))  # 4 MB of credentials
    clean = mask_credentials(body)
    assert "tok" not in clean and clean.count("***") == MAX_MASKS
    assert clean.endswith(f"more bytes withheld: over {MAX_MASKS} credentials]")
