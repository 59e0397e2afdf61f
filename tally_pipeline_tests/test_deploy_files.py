"""The files in deploy/ name only things that exist: commands, modules, ports, variables, files.

No container engine or cluster runs here, so these files are checked for what can be checked: every
YAML parses, every command they run is a real command of the image, every port agrees between the
processes that listen and those that connect, every variable is read by something, every file they
copy or mount is in the repository, Dagster's instance settings build a real instance on Postgres,
and the tally config they ship validates.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
import yaml

from tally_pipeline.api.auth import TokenBook, TokensFileError
from tally_pipeline.cli import main as tally_main
from tally_pipeline.config import load_config
from tally_pipeline_tests.kustomize import render

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
API_PORT = 8080
CODE_PORT = 4000


def _yaml(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _compose() -> dict[str, Any]:
    return _yaml(DEPLOY / "compose.yaml")[0]


def _k8s() -> list[dict[str, Any]]:
    """The Kubernetes objects of the prod overlay, rendered (test_deploy_kustomize.py checks the layout)."""
    return render(DEPLOY / "k8s" / "overlays" / "prod")


def _systemd(name: str) -> dict[str, str]:
    """The ``key=value`` lines of a unit file (one value per key is enough here)."""
    lines = (DEPLOY / "systemd" / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def _commands() -> list[list[str]]:
    """Every command line the deploy files run."""
    found = [svc["command"] for svc in _compose()["services"].values() if "command" in svc]
    for doc in _k8s():
        if doc["kind"] == "Deployment":
            found += [c["command"] for c in doc["spec"]["template"]["spec"]["containers"]]
        if doc["kind"] == "CronJob":
            found += [c["command"] for c in doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]]
    found.append(["tally", *_systemd("tally-collector.service")["ExecStart"].split()[1:]])
    docker_cmd = re.search(r"^CMD (\[.*\])$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert docker_cmd, "the Dockerfile has a CMD"
    found.append(yaml.safe_load(docker_cmd.group(1)))
    helm = _yaml(DEPLOY / "helm" / "values.yaml")[0]
    for deployment in helm["dagster-user-deployments"]["deployments"]:
        found.append(["dagster", "api", "grpc", *deployment["dagsterApiGrpcArgs"]])
    return found


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in DEPLOY.rglob("*.yaml")))
def test_every_yaml_file_parses(path: str) -> None:
    assert _yaml(ROOT / path), f"{path} is empty"


def test_tally_commands_exist_with_their_options() -> None:
    tally = [c for c in _commands() if c[0] == "tally"]
    assert {tuple(c[:2]) for c in tally} == {("tally", "serve"), ("tally", "db"), ("tally", "collect"),
                                              ("tally", "sync-remote")}
    for command in tally:
        ctx = click.Context(tally_main)
        cmd: click.Command = tally_main
        args = command[1:]
        while isinstance(cmd, click.Group):
            cmd = cmd.get_command(ctx, args[0])
            assert cmd is not None, f"{command}: no such tally command"
            args = args[1:]
        cmd.make_context(cmd.name, list(args))  # raises on an unknown option or a bad value


def _dagster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    scripts = Path(sys.executable).parent
    return subprocess.run([str(scripts / args[0]), *args[1:]], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_dagster_commands_exist() -> None:
    seen = set()
    for command in _commands():
        if command[0] not in ("dagster", "dagster-webserver", "dagster-daemon"):
            continue
        words = [w for w in command if not w.startswith("-")]
        verb = tuple(words[:3] if command[0] == "dagster" else words[:2])
        if verb in seen:
            continue
        seen.add(verb)
        done = _dagster_cli(*verb, "--help")
        assert done.returncode == 0, f"{' '.join(verb)} --help: {done.stderr[-500:]}"
        for option in (w for w in command if w.startswith("-")):
            assert option in done.stdout, f"{' '.join(verb)} has no option {option}"
    assert ("dagster", "code-server", "start") in seen and ("dagster-daemon", "run") in seen


def test_code_location_module_is_the_projects() -> None:
    modules = {c[c.index("-m") + 1] for c in _commands() if "-m" in c}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert modules == {pyproject["tool"]["dg"]["project"]["code_location_target_module"]}


@pytest.mark.slow
def test_an_installed_package_finds_its_definitions_by_the_dg_toml_it_ships(tmp_path: Path) -> None:
    """Outside a checkout there is no pyproject.toml: discovery finds the dg project by the package's own
    dg.toml (package data), which names the same root module as pyproject's [tool.dg]."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "dg.toml" in pyproject["tool"]["setuptools"]["package-data"]["tally_pipeline"]
    shipped = tomllib.loads((ROOT / "tally_pipeline" / "dg.toml").read_text())
    assert shipped["project"]["root_module"] == pyproject["tool"]["dg"]["project"]["root_module"]
    site = tmp_path / "site-packages"  # the package alone, as an image installs it
    shutil.copytree(ROOT / "tally_pipeline", site / "tally_pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\nclouds:\n  c1: {{provider: simulated, seed: 1}}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TALLY_DATABASE")}
    done = subprocess.run(
        [sys.executable, "-c", "import tally_pipeline.definitions as m; d = m.defs(); "
                               "print(m.__file__); print(sorted(j.name for j in d.jobs))"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(site), "TALLY_CONFIG": str(config)},
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    where, jobs = done.stdout.splitlines()[-2:]
    assert Path(where).is_relative_to(site)
    assert jobs == str(["dead_letter_retention", "delta_posting", "landing_files", "projection_refresh", "reconciliation",
                        "usage_daily_job", "usage_statements_job"])


def test_ports_agree_between_listeners_and_callers() -> None:
    compose = _compose()
    workspace = _yaml(DEPLOY / "dagster" / "workspace.yaml")[0]
    grpc = workspace["load_from"][0]["grpc_server"]
    assert grpc["host"] in compose["services"] and grpc["port"] == CODE_PORT
    assert grpc["location_name"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["dg"]["project"][
        "code_location_name"]
    code = compose["services"][grpc["host"]]["command"]
    assert code[code.index("-p") + 1] == str(CODE_PORT)
    helm = _yaml(DEPLOY / "helm" / "values.yaml")[0]
    assert helm["dagster-user-deployments"]["deployments"][0]["port"] == CODE_PORT

    for command in _commands():
        if command[:2] == ["tally", "serve"]:
            assert command[command.index("--port") + 1] == str(API_PORT)
    assert f"EXPOSE {API_PORT}" in (DEPLOY / "Dockerfile").read_text()
    nginx = (DEPLOY / "proxy" / "nginx.conf").read_text()
    upstreams = re.findall(r"server (\S+):(\d+)", nginx)
    api_services = {name for name, svc in compose["services"].items() if svc.get("command", [])[:2] == ["tally", "serve"]}
    assert {host for host, _ in upstreams} == api_services and len(api_services) == 2
    assert {int(port) for _, port in upstreams} == {API_PORT}
    for name in api_services:
        assert f":{API_PORT}/healthz" in " ".join(compose["services"][name]["healthcheck"]["test"])
    deployment = next(d for d in _k8s() if d["kind"] == "Deployment" and d["metadata"]["name"] == "tally-api")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == API_PORT
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_every_variable_is_read_by_something() -> None:
    compose = _compose()
    names = set(compose["x-tally"]["environment"])
    configmap = next(d for d in _k8s() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tally-config")
    names |= set(configmap["data"])
    names |= {"TALLY_DATABASE"}  # the k8s Secret's key, named in the comment that creates it
    source = "\n".join(p.read_text() for p in (ROOT / "tally_pipeline").rglob("*.py"))
    instance = (DEPLOY / "dagster" / "dagster.yaml").read_text()
    for name in sorted(names):
        assert f'"{name}"' in source or f"env: {name}" in instance, f"{name} is set but nothing reads it"


def test_every_copied_or_mounted_file_exists() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", dockerfile, re.M):
        *sources, _dest = line.split()
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
    compose = _compose()
    for svc in compose["services"].values():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"compose mounts {source}, which is not in deploy/"
    assert compose["x-tally"]["build"]["dockerfile"] == "deploy/Dockerfile"


def test_image_pins_the_dagster_family_of_pyproject() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dagster = next(d for d in pyproject["dependencies"] if d.startswith("dagster-postgres=="))
    k8s = next(d for d in pyproject["optional-dependencies"]["deploy"] if d.startswith("dagster-k8s=="))
    assert k8s.split("==")[1] == dagster.split("==")[1]
    assert 'pip install ".[deploy]"' in (DEPLOY / "Dockerfile").read_text()


def test_the_shipped_tally_config_and_tokens_validate(tmp_path: Path) -> None:
    config = load_config(str(DEPLOY / "tally" / "tally.yaml"))
    assert sorted(config.clouds) == ["demo-a", "demo-b", "demo-c"]
    assert config.tokens_file == Path("/etc/tally/tokens.yaml")  # compose mounts deploy/tally/ there
    with pytest.raises(TokensFileError, match="example placeholder"):  # examples: tally serve refuses them
        TokenBook.load(DEPLOY / "tally" / "tokens.yaml")
    inline = next(d for d in _k8s() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tally-files")
    (tmp_path / "tally.yaml").write_text(inline["data"]["tally.yaml"])
    assert load_config(str(tmp_path / "tally.yaml")).clouds["region-one"].provider == "openstack"


@pytest.mark.slow
def test_dagster_instance_settings_build_a_queued_postgres_instance(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster import DagsterInstance
    from dagster._core.run_coordinator import QueuedRunCoordinator

    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((DEPLOY / "dagster" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for key, value in (("HOST", info.get("host", "127.0.0.1")), ("USER", info.get("user", "postgres")),
                       ("PASSWORD", info.get("password", "")), ("DB", info["dbname"])):
        monkeypatch.setenv(f"DAGSTER_PG_{key}", str(value))
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert limits == [{"key": "tally/cloud", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
                          {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]
    helm = _yaml(DEPLOY / "helm" / "values.yaml")[0]
    queued = helm["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert queued["tagConcurrencyLimits"] == limits  # the chart queues runs the same way
    with psycopg.connect(pg_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"runs", "event_logs"} <= tables


def _nginx_size(value: str) -> int:
    units = {"k": 1024, "m": 1024 * 1024}
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def test_the_proxy_mirrors_the_apis_own_limits() -> None:
    from tally_pipeline.config import ApiSettings

    api = ApiSettings()
    nginx = dict(re.findall(r"^\s*([a-z_]+) ([^;]+);", (DEPLOY / "proxy" / "nginx.conf").read_text(), re.M))
    count, size = nginx["large_client_header_buffers"].split()
    assert int(count) * _nginx_size(size) == api.max_header_bytes
    assert _nginx_size(size) == api.max_request_line_bytes
    assert _nginx_size(nginx["client_max_body_size"]) == api.max_body_bytes
    assert float(nginx["client_header_timeout"].rstrip("s")) == api.header_timeout
    assert float(nginx["client_body_timeout"].rstrip("s")) == api.body_timeout
    # The proxy's idle client timeout matches the API's; its upstream keep-alive stays below it.
    timeouts = re.findall(r"keepalive_timeout (\d+)s;", (DEPLOY / "proxy" / "nginx.conf").read_text())
    assert sorted(int(t) for t in timeouts) == [api.keep_alive_timeout - 1, api.keep_alive_timeout]


def test_the_collector_deployments_agree_on_port_probes_secrets_and_stop_time() -> None:
    from tally_pipeline.config import CollectorSettings

    drain = CollectorSettings().drain_timeout
    service = _compose()["services"]["collector"]
    command = service["command"]
    port = command[command.index("--metrics-port") + 1]
    assert f":{port}/healthz" in " ".join(service["healthcheck"]["test"]) and service["ports"] == [f"${{TALLY_METRICS_BIND:-127.0.0.1}}:{port}:{port}"]
    assert command[command.index("--api-url") + 1] == f"http://proxy:{API_PORT}"
    token = command[command.index("--token-file") + 1]
    assert (DEPLOY / "tally" / Path(token).name).read_text().strip() == "change-me-collector"  # in tokens.yaml
    assert float(service["stop_grace_period"].rstrip("s")) > drain
    deployment = next(d for d in _k8s() if d["kind"] == "Deployment" and d["metadata"]["name"] == "tally-collector")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    k8s_port = container["command"][container["command"].index("--metrics-port") + 1]
    assert container["ports"] == [{"name": "metrics", "containerPort": int(k8s_port)}]
    # not ready while the buffer's disk is full (/healthz 503), but alive: a restart would not free the disk
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["terminationGracePeriodSeconds"] > drain
    assert container["command"][container["command"].index("--api-url") + 1] == "http://tally-api"  # api.yaml's Service
    unit = _systemd("tally-collector.service")
    assert float(unit["TimeoutStopSec"]) > drain and unit["KillSignal"] == "SIGTERM"
    # Every secret the files hand the collector is read by it.
    source = (ROOT / "tally_pipeline" / "commands" / "collect.py").read_text()
    named = set(service["environment"]) - set(_compose()["x-tally"]["environment"])
    named |= set(re.findall(r"TALLY_COLLECTOR_[A-Z_]+", (DEPLOY / "k8s" / "base" / "collector.yaml").read_text()))
    named |= set(re.findall(r"TALLY_COLLECTOR_[A-Z_]+", (DEPLOY / "systemd" / "tally-collector.service").read_text()))
    assert named == {"TALLY_COLLECTOR_TRANSPORT_URL", "TALLY_COLLECTOR_TRANSPORT_PASSWORD", "TALLY_COLLECTOR_TOKEN"}
    for name in named:
        assert f'"{name}"' in source, name
