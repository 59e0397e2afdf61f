"""``deploy/k8s/`` as kustomize lays it out, rendered here in Python (``kustomize.py``; no kustomize binary or
cluster runs here): the prod overlay builds from the base, the reconciliation component and a patch;
every file, ConfigMap, Secret, volume, port and Service it names resolves; and the ``tally-sync``
CronJob calls the API's sync route for every configured cloud, on the reconciliation schedule, with an
admin token from a Secret, following each run to its end within the Job's deadline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import click
import pytest

from tally_pipeline.cli import main as tally_main
from tally_pipeline.config import load_config
from tally_pipeline.defs.reconciliation.per_cloud import reconciliation_defs
from tally_pipeline.services.reconciliation_remote import SYNC_PATH
from tally_pipeline.store import open_store
from tally_pipeline_tests.api.openapi_spec import app_operations, spec_operations
from tally_pipeline_tests.api_setup import build_api
from tally_pipeline_tests.kustomize import LayoutError, kustomization, render

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "deploy" / "k8s"
PROD = LAYOUT / "overlays" / "prod"


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(PROD)}


def _documented_secrets() -> dict[str, set[str]]:
    """The Secrets docs/deploy.md tells the operator to create, with their keys."""
    found: dict[str, set[str]] = {}
    for name, args in re.findall(r"kubectl create secret generic (\S+)((?: --from-\S+)+)", (ROOT / "docs" / "deploy.md").read_text()):
        keys = {m.split("=", 1)[0] for m in re.findall(r"--from-literal=(\S+)", args)}
        for source in re.findall(r"--from-file=(\S+)", args):  # KEY=PATH, or PATH (the key is its file name)
            keys.add(source.split("=", 1)[0] if "=" in source else PurePosixPath(source).name)
        found[name] = keys
    return found


def _pod_specs(objects: dict[tuple[str, str], dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for (kind, name), obj in objects.items():
        if kind == "Deployment":
            yield name, obj["spec"]["template"]["spec"]
        elif kind == "CronJob":
            yield name, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_the_prod_overlay_builds_from_the_base_the_component_and_its_patch(objects) -> None:
    assert {("Deployment", "tally-api"), ("Service", "tally-api"), ("ConfigMap", "tally-config"),
            ("ConfigMap", "tally-files"), ("CronJob", "tally-sync")} <= set(objects)
    assert objects[("Deployment", "tally-api")]["spec"]["replicas"] == 3  # the overlay's patch
    assert render(LAYOUT / "base") and ("CronJob", "tally-sync") not in {
        (o["kind"], o["metadata"]["name"]) for o in render(LAYOUT / "base")}  # the CronJob comes with the component
    component = kustomization(LAYOUT / "components" / "reconciliation")
    assert component["kind"] == "Component"
    assert [(PROD / c).resolve() for c in kustomization(PROD)["components"]] == [
        (LAYOUT / "components" / "reconciliation").resolve()]


def test_the_base_lists_every_manifest_beside_it() -> None:
    base = LAYOUT / "base"
    listed = {(base / r).resolve() for r in kustomization(base)["resources"]}
    present = {p.resolve() for p in base.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert listed == present


def test_every_reference_resolves(objects) -> None:
    configmaps = {name for kind, name in objects if kind == "ConfigMap"}
    secrets = _documented_secrets()
    assert {"tally-database", "tally-tokens", "tally-sync-token"} <= set(secrets)
    for owner, spec in _pod_specs(objects):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configmaps, (owner, volume)
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, (owner, volume)
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (owner, mount)
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, (owner, source)
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, (owner, source)
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["key"] in secrets.get(ref["name"], set()), (owner, variable)
    for (kind, name), service in objects.items():
        if kind != "Service":
            continue
        selected = [d["spec"]["template"] for (k, _), d in objects.items() if k == "Deployment"
                    and d["spec"]["template"]["metadata"]["labels"].items() >= service["spec"]["selector"].items()]
        assert selected, f"Service {name} selects no Deployment's pods"
        ports = {p["name"] for t in selected for c in t["spec"]["containers"] for p in c.get("ports", [])}
        assert all(p["targetPort"] in ports for p in service["spec"]["ports"]), service


def test_the_sync_cronjob_calls_the_route_for_every_configured_cloud_on_the_schedule(objects) -> None:
    cron = objects[("CronJob", "tally-sync")]["spec"]
    [schedule] = reconciliation_defs(["c1"]).schedules
    assert cron["schedule"] == schedule.cron_schedule == "*/10 * * * *"  # the Dagster schedule's own
    assert cron["concurrencyPolicy"] == "Forbid"
    job = cron["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"][:2] == ["tally", "sync-remote"]
    command = tally_main.get_command(click.Context(tally_main), "sync-remote")
    params = command.make_context("sync-remote", list(container["command"][2:])).params
    assert params["clouds"] == ()  # no --cloud: one call per cloud of the config
    assert params["timeout"] < job["activeDeadlineSeconds"]  # the command reports before the Job is killed

    # The route: the URL names the API's Service and port, whose pods serve the sync route.
    url = urlsplit(params["api_url"])
    service = objects[("Service", url.hostname)]["spec"]
    assert (url.port or 80) in {p["port"] for p in service["ports"]}
    with open_store("duckdb://:memory:") as store:
        routes = app_operations(build_api(store).app)
    assert (SYNC_PATH, "POST") in routes and (SYNC_PATH, "POST") in spec_operations()
    assert (SYNC_PATH + "/runs/{run_id}", "GET") in routes

    # The clouds: the CronJob reads the config the API reads, from the same ConfigMap and path.
    config_path = objects[("ConfigMap", "tally-config")]["data"]["TALLY_CONFIG"]
    assert {"configMapRef": {"name": "tally-config"}} in container["envFrom"]
    mount = next(m for m in container["volumeMounts"] if str(PurePosixPath(config_path).parent) == m["mountPath"])
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    api_pod = objects[("Deployment", "tally-api")]["spec"]["template"]["spec"]
    assert volume["configMap"] in [v.get("configMap") for v in api_pod["volumes"]]
    files = objects[("ConfigMap", volume["configMap"]["name"])]["data"]
    assert PurePosixPath(config_path).name in files

    # The token and the key: the option's variables, from a Secret and from the Job's name.
    variables = {v["name"]: v for v in container["env"]}
    by_option = {p.name: p.envvar for p in command.params}
    token = variables[by_option["token"]]
    assert "value" not in token and set(token["valueFrom"]) == {"secretKeyRef"}
    key = variables[by_option["key"]]["valueFrom"]["fieldRef"]["fieldPath"]
    assert key == "metadata.labels['batch.kubernetes.io/job-name']"


def test_the_shipped_config_names_the_clouds_the_cronjob_reconciles(objects, tmp_path: Path) -> None:
    files = objects[("ConfigMap", "tally-files")]["data"]
    (tmp_path / "tally.yaml").write_text(files["tally.yaml"])
    assert sorted(load_config(str(tmp_path / "tally.yaml")).clouds) == ["region-one"]


def test_the_renderer_refuses_a_layout_it_cannot_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [missing.yaml]\n")
    with pytest.raises(LayoutError, match="missing.yaml, which does not exist"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: x-\n")
    with pytest.raises(LayoutError, match="namePrefix"):
        render(tmp_path)
