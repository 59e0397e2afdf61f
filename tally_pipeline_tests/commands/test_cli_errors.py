"""Failures a user meets are tally's kinds (``core/errors.py``) with a message that says what to do,
and the command line prints them as one line, ``Error: …``, exit status 1, no traceback."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from tally_pipeline.cli import main
from tally_pipeline.core.errors import ConfigurationError, InputError, TallyError
from tally_pipeline.schemas import default_registry, load_registry
from tally_pipeline.store import open_store


def _one_line_error(result: Result) -> str:
    """The single ``Error:`` line a refused command printed (and nothing else)."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0].removeprefix("Error: ")


def _meterless_schemas(directory: Path) -> Path:
    """A schemas_dir replacing every packaged type with one that has no meter."""
    directory.mkdir()
    for name in default_registry().names:
        (directory / f"{name}.json").write_text(json.dumps({"resource_type": name, "size": {"type": "object"}}))
    return directory


# -- an unsupported database URL ---------------------------------------------------------------------

def test_an_unsupported_database_url_is_a_configuration_error_naming_the_urls_to_give() -> None:
    from tally_pipeline.store import UnsupportedDatabase

    with pytest.raises(UnsupportedDatabase) as raised:
        open_store("mysql://tally:s3cret@db/tally")
    assert isinstance(raised.value, ConfigurationError) and isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert "duckdb:///PATH" in message and "postgresql://" in message and "--database" in message
    assert "s3cret" not in message


def test_the_command_line_prints_an_unsupported_database_url_as_one_redacted_line() -> None:
    # bench reconcile opens the URL itself (no configuration in between): the tally group prints it
    result = CliRunner().invoke(main, ["bench", "reconcile", "--database", "mysql://tally:s3cret@db/tally"])
    line = _one_line_error(result)
    assert line.startswith("unsupported database URL 'mysql://tally:***@db/tally': give duckdb:///PATH")
    assert "s3cret" not in result.output


# -- --from after --to -------------------------------------------------------------------------------

def test_a_day_range_ending_before_it_starts_is_an_input_error(tmp_path: Path) -> None:
    from tally_pipeline.services.ledger.daily import DayRangeError, recompute_usage_daily

    with open_store(f"duckdb://{tmp_path / 't.duckdb'}") as store, pytest.raises(DayRangeError) as raised:
        recompute_usage_daily(store, default_registry(), date(2026, 3, 5), date(2026, 3, 1))
    assert isinstance(raised.value, InputError) and isinstance(raised.value, ValueError)
    assert str(raised.value) == ("the first day 2026-03-05 is after the last day 2026-03-01: "
                                 "give the first day on or before the last day")


def test_usage_daily_with_from_after_to_says_which_option_to_change(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["usage", "daily", "--database", f"duckdb://{tmp_path / 't.duckdb'}",
                                       "--from", "2026-03-05", "--to", "2026-03-01"])
    assert _one_line_error(result) == "--from 2026-03-05 is after --to 2026-03-01: give --from on or before --to"


# -- no meters registered ----------------------------------------------------------------------------

def test_no_registered_meters_is_a_configuration_error_saying_where_meters_come_from(tmp_path: Path) -> None:
    from tally_pipeline.core.registry import RegistryError

    registry = load_registry(_meterless_schemas(tmp_path / "schemas"))
    assert registry.meters() == ()
    with open_store(f"duckdb://{tmp_path / 't.duckdb'}") as store, pytest.raises(RegistryError) as raised:
        store.usage_sql().meters(registry.meters())
    assert isinstance(raised.value, ConfigurationError)
    assert "no meters are registered" in str(raised.value) and "`meters` entry" in str(raised.value)


def test_usage_daily_without_meters_prints_what_to_register(tmp_path: Path) -> None:
    schemas = _meterless_schemas(tmp_path / "schemas")
    config = tmp_path / "tally.yaml"
    config.write_text(f"schemas_dir: {schemas}\ndatabase: duckdb://{tmp_path / 't.duckdb'}\n")
    result = CliRunner().invoke(main, ["usage", "daily", "--config", str(config), "--day", "2026-03-01"])
    line = _one_line_error(result)
    assert line.startswith("no meters are registered, so there is no usage to compute: give at least one type")


# -- an unknown provider -----------------------------------------------------------------------------

def test_an_unknown_provider_is_a_configuration_error_naming_the_key_and_the_providers() -> None:
    from tally_pipeline.config import ConfigError
    from tally_pipeline.providers import adapter_for

    with pytest.raises(ConfigError) as raised:
        adapter_for("edge", SimpleNamespace(provider="carrier-pigeon"))
    assert isinstance(raised.value, ConfigurationError) and isinstance(raised.value, ValueError)
    assert str(raised.value) == ("clouds.edge.provider: unknown provider 'carrier-pigeon'; set it to 'openstack' "
                                 "(a real cloud) or 'simulated' (a generated one)")


# -- the command line ---------------------------------------------------------------------------------

def test_a_tally_error_is_refused_as_one_redacted_line_with_exit_status_1() -> None:
    from tally_pipeline.commands._options import refusal

    refused = refusal(TallyError("cannot reach postgresql://tally:s3cret@db/tally\n  the server is down\n"))
    assert refused.exit_code == 1
    assert refused.message == "cannot reach postgresql://tally:***@db/tally; the server is down"


# -- other refusals a user meets ------------------------------------------------------------------------

def test_a_month_not_written_yyyy_mm_is_an_input_error_with_an_example() -> None:
    from tally_pipeline.core.statements import MonthError, parse_month

    with pytest.raises(MonthError, match=r"month must be YYYY-MM, not '2026-13' \(e.g. 2026-12\)") as raised:
        parse_month("2026-13")
    assert isinstance(raised.value, InputError) and isinstance(raised.value, ValueError)


def test_a_collector_api_url_that_is_not_http_is_a_configuration_error_naming_the_option() -> None:
    from tally_pipeline.collector.client import events_url
    from tally_pipeline.collector.errors import ApiURLError

    with pytest.raises(ApiURLError) as raised:
        events_url("tally-api:8080")
    assert isinstance(raised.value, ConfigurationError) and isinstance(raised.value, ValueError)
    assert str(raised.value).startswith("collector.api_url (--api-url) 'tally-api:8080' is not an http(s) URL")
    assert events_url("http://tally-api:8080") == "http://tally-api:8080/v1/events"


def test_down_cell_for_a_type_other_than_instance_is_refused_by_the_configuration(tmp_path: Path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text("clouds:\n  sim:\n    provider: simulated\n    failing_types: {volume: down_cell}\n")
    result = CliRunner().invoke(main, ["sync", "--config", str(config), "--database",
                                       f"duckdb://{tmp_path / 't.duckdb'}", "sim"])
    line = _one_line_error(result)
    assert "volume: down_cell is a nova fault, for instance only; give volume error, timeout or empty" in line
