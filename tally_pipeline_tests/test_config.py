from pathlib import Path

import pytest

from tally_pipeline.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tally.yaml"
    path.write_text(text)
    return path


def test_no_config_means_embedded_duckdb_under_dot_tally(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TALLY_CONFIG", raising=False)
    config = load_config()
    assert config.database == f"duckdb://{tmp_path / '.tally' / 'tally.duckdb'}"
    assert config.reconciliation.settle_window == 300 and config.reconciliation.mass_delete_guard == 0.5
    assert config.ledger.ingest_lag == 900 and config.ledger.window_days == 35


def test_full_config_and_relative_paths(tmp_path) -> None:
    path = write(tmp_path, """
database: duckdb://data/tally.duckdb
tokens_file: tokens.yaml
clouds:
  region-one: {provider: openstack, os_cloud: region-one}
  demo: {provider: simulated, seed: 7}
reconciliation: {settle_window: 120, mass_delete_guard: 1.0}
ledger: {ingest_lag: 60, window_days: 10}
""")
    config = load_config(path)
    assert config.database == f"duckdb://{tmp_path / 'data' / 'tally.duckdb'}"
    assert config.tokens_file == tmp_path / "tokens.yaml"
    assert config.clouds["region-one"].provider == "openstack"
    assert config.clouds["demo"].seed == 7
    assert config.reconciliation.mass_delete_guard == 1.0


def test_env_var_and_database_override(tmp_path, monkeypatch) -> None:
    path = write(tmp_path, "database: postgresql://tally@db/tally\n")
    monkeypatch.setenv("TALLY_CONFIG", str(path))
    assert load_config().database == "postgresql://tally@db/tally"
    assert load_config(database="duckdb:///tmp/x.duckdb").database == "duckdb:///tmp/x.duckdb"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("databse: duckdb://x.duckdb\n", "databse: unknown key"),
        ("database: mysql://x\n", "database"),
        ("clouds: {c1: {provider: azure}}\n", "clouds.c1"),
        ("clouds: {c1: {provider: simulated, sede: 1}}\n", "clouds.c1.simulated.sede: unknown key"),
        ("clouds: {'bad name': {provider: simulated}}\n", "cloud name"),
        ("reconciliation: {settle_window: -1}\n", "reconciliation.settle_window"),
        ("reconciliation: {mass_delete_guard: 1.5}\n", "reconciliation.mass_delete_guard"),
        ("ledger: {window_days: 0}\n", "ledger.window_days"),
        ("api: {sync_workers: 0}\n", "api.sync_workers"),
        ("duckdb: {threads: 0}\n", "duckdb.threads"),
        ("dagster: {url: http://dagster:3000, jobb: x}\n", "dagster.jobb: unknown key"),
        ("dagster: {url: 'dagster:3000'}\n", "dagster.url"),
        ("dagster: {location: tally_pipeline}\n", "dagster.url"),
        ("- just\n- a list\n", "mapping"),
        ("database: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, names) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    assert names in str(exc.value)
    assert "tally.yaml" in str(exc.value)


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("threads", [1, 3])
def test_the_embedded_file_runs_on_the_configured_threads(tmp_path, threads) -> None:
    from tally_pipeline.runtime import Runtime

    rt = Runtime.load(str(write(tmp_path, f"database: duckdb://tally.duckdb\nduckdb: {{threads: {threads}}}\n")))
    try:
        assert rt.store.query("SELECT current_setting('threads')") == [(threads,)]
    finally:
        rt.close()


def test_without_the_setting_duckdb_keeps_its_own_default(tmp_path) -> None:
    import duckdb

    from tally_pipeline.runtime import Runtime

    own = duckdb.connect(":memory:")
    try:
        default = own.execute("SELECT current_setting('threads')").fetchall()
    finally:
        own.close()
    rt = Runtime.load(str(write(tmp_path, "database: 'duckdb://:memory:'\n")))
    try:
        assert rt.store.query("SELECT current_setting('threads')") == default
    finally:
        rt.close()
