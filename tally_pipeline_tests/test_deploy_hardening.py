"""No usable default credential and nothing more open than it must be, in what deploy/ ships (issue #36):

- the rendered k8s prod overlay runs every pod as non-root with a read-only root filesystem, every
  capability dropped, no privilege escalation and the RuntimeDefault seccomp profile, and selects every
  pod with a NetworkPolicy that admits only what that component needs (evaluated here, rule by rule);
- compose publishes nothing beyond 127.0.0.1 unless the operator says so, and takes every password
  from an ``.env`` the operator writes (the example shipped cannot be used as is);
- the example tokens it ships are refused by ``tally serve``'s tokens rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tally_pipeline.api.auth import TokenBook, TokensFileError
from tally_pipeline_tests.kustomize import render

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
Labels = dict[str, str]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render(DEPLOY / "k8s" / "overlays" / "prod")


def _pods(objects: list[dict[str, Any]]) -> list[tuple[Labels, dict[str, Any]]]:
    found = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
        elif obj["kind"] == "CronJob":
            template = obj["spec"]["jobTemplate"]["spec"]["template"]
        else:
            continue
        found.append((template["metadata"]["labels"], template["spec"]))
    return found


def test_every_pod_runs_unprivileged_on_a_read_only_root(objects: list[dict[str, Any]]) -> None:
    pods = _pods(objects)
    assert {labels["app"] for labels, _ in pods} == {"tally-api", "tally-collector", "tally-sync"}
    for labels, spec in pods:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, labels
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, labels
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, labels
            assert security["allowPrivilegeEscalation"] is False, labels
            assert security["capabilities"] == {"drop": ["ALL"]}, labels
            assert "add" not in security["capabilities"] and not security.get("privileged", False)
            # a read-only root needs a writable scratch directory of its own
            tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
            assert any(v["name"] == tmp["name"] and "emptyDir" in v for v in spec["volumes"])


def _selects(selector: dict[str, Any], labels: Labels) -> bool:
    assert set(selector) <= {"matchLabels"}, f"this evaluator knows matchLabels only: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_matches(peer: dict[str, Any], labels: Labels, same_namespace: bool, namespace: Labels) -> bool:
    assert set(peer) <= {"podSelector", "namespaceSelector"}, f"this evaluator does not know {peer}"
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], namespace):
            return False
    elif not same_namespace:
        return False
    return "podSelector" not in peer or _selects(peer["podSelector"], labels)


def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return ports is None or any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports)


def _allowed(policies: list[dict[str, Any]], direction: str, pod: Labels, peer: Labels, port: int,
             protocol: str = "TCP", *, same_namespace: bool = True, namespace: Labels | None = None) -> bool:
    """Whether NetworkPolicy semantics admit this traffic (``direction``: Ingress into / Egress out of ``pod``);
    ``peer`` is the other pod's labels (an outside address: None-like, empty labels and not in any namespace)."""
    selecting = [p for p in policies if _selects(p["spec"]["podSelector"], pod)
                 and direction in p["spec"]["policyTypes"]]
    if not selecting:
        return True  # not isolated
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in selecting:
        for rule in policy["spec"].get(key, []):
            peers = rule.get(peers_key)
            in_peers = peers is None or any(_peer_matches(p, peer, same_namespace, namespace or {}) for p in peers)
            if in_peers and _port_matches(rule, port, protocol):
                return True
    return False


API, COLLECTOR, SYNC = {"app": "tally-api"}, {"app": "tally-collector"}, {"app": "tally-sync"}
STRANGER = {"app": "something-else"}
KUBE_SYSTEM = {"kubernetes.io/metadata.name": "kube-system"}


def test_every_pod_is_isolated_both_ways(objects: list[dict[str, Any]]) -> None:
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for labels, _ in _pods(objects):
        selecting = [p for p in policies if _selects(p["spec"]["podSelector"], labels)]
        assert {t for p in selecting for t in p["spec"]["policyTypes"]} == {"Ingress", "Egress"}, labels


@pytest.mark.parametrize("direction,pod,peer,port,protocol,outside,admitted", [
    # the API: called by the collector and the sync job, by labelled clients; by nobody else
    ("Ingress", API, COLLECTOR, 8080, "TCP", False, True),
    ("Ingress", API, SYNC, 8080, "TCP", False, True),
    ("Ingress", API, {"tally-api-client": "true"}, 8080, "TCP", False, True),
    ("Ingress", API, STRANGER, 8080, "TCP", False, False),
    ("Ingress", API, COLLECTOR, 22, "TCP", False, False),
    ("Ingress", API, {}, 8080, "TCP", True, False),  # an address outside the cluster
    # the API reaches Postgres and the clouds' APIs, and DNS; not, say, a RabbitMQ
    ("Egress", API, {}, 5432, "TCP", True, True),
    ("Egress", API, {}, 5000, "TCP", True, True),
    ("Egress", API, {}, 443, "TCP", True, True),
    ("Egress", API, {}, 5672, "TCP", True, False),
    # the collector: scraped on 8081 by labelled pods; reaches the API, RabbitMQ and DNS only
    ("Ingress", COLLECTOR, {"tally-metrics": "true"}, 8081, "TCP", False, True),
    ("Ingress", COLLECTOR, STRANGER, 8081, "TCP", False, False),
    ("Ingress", COLLECTOR, API, 8080, "TCP", False, False),
    ("Egress", COLLECTOR, API, 8080, "TCP", False, True),
    ("Egress", COLLECTOR, {}, 5672, "TCP", True, True),
    ("Egress", COLLECTOR, {}, 5671, "TCP", True, True),
    ("Egress", COLLECTOR, {}, 5432, "TCP", True, False),
    ("Egress", COLLECTOR, STRANGER, 8080, "TCP", False, False),
    # the sync job: admits nothing, reaches the API only
    ("Ingress", SYNC, API, 8080, "TCP", False, False),
    ("Egress", SYNC, API, 8080, "TCP", False, True),
    ("Egress", SYNC, {}, 443, "TCP", True, False),
    ("Egress", SYNC, {}, 5432, "TCP", True, False),
])
def test_the_network_policies_admit_what_each_component_needs_and_nothing_else(
        objects: list[dict[str, Any]], direction: str, pod: Labels, peer: Labels, port: int, protocol: str,
        outside: bool, admitted: bool) -> None:
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert _allowed(policies, direction, pod, peer, port, protocol, same_namespace=not outside) is admitted


@pytest.mark.parametrize("pod", [API, COLLECTOR, SYNC])
def test_every_component_resolves_names(objects: list[dict[str, Any]], pod: Labels) -> None:
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for protocol in ("UDP", "TCP"):
        assert _allowed(policies, "Egress", pod, {"k8s-app": "kube-dns"}, 53, protocol, same_namespace=False,
                        namespace=KUBE_SYSTEM)


def _compose() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


_DEFAULT = re.compile(r"\$\{(\w+):-([^}]*)\}")


def test_compose_publishes_nothing_beyond_the_host_by_default() -> None:
    published = 0
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            published += 1
            bound = _DEFAULT.sub(lambda m: m.group(2), str(port))
            host, _, rest = bound.partition(":")
            assert host == "127.0.0.1" and rest.count(":") == 1, f"{name} publishes {port} beyond 127.0.0.1"
    assert published >= 3  # the proxy (API), the Dagster UI, the collector's metrics


def test_compose_takes_every_password_from_the_operators_env_file() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    required = set(re.findall(r"\$\{(\w+):\?[^}]*\}", text))
    assert {"POSTGRES_PASSWORD", "TALLY_DB_PASSWORD", "DAGSTER_DB_PASSWORD", "ANALYST_DB_PASSWORD"} <= required
    for name, service in _compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key and value:  # required from .env, or from the environment with no default
                assert re.fullmatch(r"\$\{\w+(?::\?[^}]*|:-)\}", str(value)), f"{name}: {key} has a default"
        database = (service.get("environment") or {}).get("TALLY_DATABASE", "")
        assert not database or re.search(r":\$\{TALLY_DB_PASSWORD:\?[^}]*\}@", database), name
    init = (DEPLOY / "postgres" / "init.sh").read_text()
    assert "PASSWORD '" not in init and not (DEPLOY / "postgres" / "init.sql").exists()
    # the example lists every variable compose requires, each empty: it cannot be used as is
    example = dict(line.split("=", 1) for line in (DEPLOY / "env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    assert required <= set(example) and all(v == "" for k, v in example.items() if k in required)
    assert "deploy/.env" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize("path", ["deploy/tally/tokens.yaml"])
def test_the_shipped_example_tokens_are_refused(path: str) -> None:
    with pytest.raises(TokensFileError, match="example placeholder"):
        TokenBook.load(ROOT / path)


@pytest.mark.parametrize("token,rule", [
    ("change-me-collector", "example placeholder"),
    ("CHANGE_ME_please-0123456789", "example placeholder"),
    ("my-example-token-0123456789", "example placeholder"),
    ("<your-token-here>0123456789", "example placeholder"),
    ("Zq3-short", "too weak: 9 characters"),
    ("abababababababababababababab", "too weak: 2 distinct characters"),
])
def test_tally_serve_refuses_a_placeholder_or_weak_token_naming_the_rule(tmp_path: Path, token: str,
                                                                         rule: str) -> None:
    import subprocess
    import sys

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f'tokens:\n  - {{token: "{token}", scopes: [read]}}\n')
    done = subprocess.run([sys.executable, "-c", "from tally_pipeline.cli import main; main()", "serve",
                           "--tokens-file", str(tokens), "--port", "0"],
                          capture_output=True, text=True, timeout=120, env={**__import__("os").environ,
                                                                            "TALLY_DATABASE": "duckdb:///:memory:"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: ") and rule in line and "token_urlsafe" in line
    assert token not in line  # the refusal never prints the token


def test_a_digest_of_a_shipped_example_is_refused_and_a_real_token_is_taken(tmp_path: Path) -> None:
    import hashlib
    import secrets

    hashed = tmp_path / "hashed.yaml"
    hashed.write_text(f"tokens:\n  - {{token_sha256: {hashlib.sha256(b'change-me-reader').hexdigest()}, "
                      "scopes: [read]}\n")
    with pytest.raises(TokensFileError, match="example placeholder"):
        TokenBook.load(hashed)
    real = secrets.token_urlsafe(32)
    good = tmp_path / "good.yaml"
    good.write_text(f'tokens:\n  - {{token: "{real}", scopes: [read]}}\n')
    assert TokenBook.load(good).authenticate(real) is not None
