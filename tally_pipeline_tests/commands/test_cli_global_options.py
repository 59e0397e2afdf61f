"""``--config`` and ``--database`` before the command name, as the README says: ``tally --database URL
db migrate``. The command's own option wins over the global one, which wins over the environment."""

from pathlib import Path

from click.testing import CliRunner

from tally_pipeline.cli import main


def migrate(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_database_before_the_command(tmp_path: Path) -> None:
    before = tmp_path / "before.duckdb"
    assert "migrations applied" in migrate(["--database", f"duckdb://{before}", "db", "migrate"])
    assert before.exists()


def test_the_commands_own_option_wins_and_the_global_one_beats_the_environment(tmp_path: Path) -> None:
    own, glob, env = (tmp_path / f"{n}.duckdb" for n in ("own", "global", "env"))
    migrate(["--database", f"duckdb://{glob}", "db", "migrate", "--database", f"duckdb://{own}"])
    assert own.exists() and not glob.exists()
    migrate(["--database", f"duckdb://{glob}", "db", "migrate"], env={"TALLY_DATABASE": f"duckdb://{env}"})
    assert glob.exists() and not env.exists()


def test_config_before_the_command(tmp_path: Path) -> None:
    database = tmp_path / "from-config.duckdb"
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{database}\n")
    migrate(["--config", str(config), "db", "migrate"], env={"TALLY_DATABASE": ""})
    assert database.exists()
