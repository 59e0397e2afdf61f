"""tally as an operator runs it against the real control plane: its own processes and commands only.

One ``tally serve`` on a Postgres database of the tier's own, one ``tally collect openstack`` on the stack's
vhost, and the CLI (``tally sync``, ``tally post-usage``, ``tally ledger verify``, ``tally openstack check``)
run as processes with the same configuration file. What tally stored is read back through its own API.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tally_pipeline.bench.collector_process import CollectorProcess
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline_tests.faults import migrate, wait_until
from tally_pipeline_tests.rabbit import rabbitmqctl
from tally_pipeline_tests.realstack.stack import Stack

#: The cloud as tally names it (admin credential, a page size of 2 so every listing pages), and the same
#: cloud seen through the tenant's member-only credential.
CLOUD = "rs"
MEMBER_CLOUD = "rs-member"
#: Where the real services publish: cinder 29 on oslo.messaging's default exchange (the tier has no octavia).
SERVICE_EXCHANGES = {"nova": "nova", "cinder": "openstack", "neutron": "neutron", "glance": "glance"}
EXCHANGES = tuple(sorted(set(SERVICE_EXCHANGES.values())))
#: What the tier's services hold (no octavia: a load balancer listing would fail, and the sync be partial).
RESOURCE_TYPES = ["instance", "volume", "floating_ip", "image"]
TOPICS = ("notifications", "versioned_notifications")
POOL = "tally"


@dataclass
class Product:
    stack: Stack
    root: Path
    database: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    api: ServeProcess | None = None
    collector: CollectorProcess | None = None

    # ---- files --------------------------------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        return self.root / "tally.yaml"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "OS_CLIENT_CONFIG_FILE": str(self.root / "clouds.yaml"),
                "TALLY_CONFIG": str(self.config_path)}

    def write_files(self) -> None:
        (self.root / "clouds.yaml").write_text(yaml.safe_dump(self.stack.identity.clouds_yaml()))  # type: ignore[union-attr]
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        (self.root / "tokens.yaml").write_text(yaml.safe_dump(
            {"tokens": [{"token_sha256": digest, "scopes": ["ingest:*", "read", "admin"]}]}))
        (self.root / "collector.token").write_text(self.token + "\n")
        config = {
            "database": self.database,
            "tokens_file": str(self.root / "tokens.yaml"),
            "clouds": {
                CLOUD: {"provider": "openstack", "os_cloud": "realstack", "page_size": 2, "timeout": 60,
                        "resource_types": RESOURCE_TYPES},
                MEMBER_CLOUD: {"provider": "openstack", "os_cloud": "realstack-member", "timeout": 60,
                               "resource_types": RESOURCE_TYPES},
            },
            # Minutes, not the defaults' hours: nothing the tier changes waits for a settle window, and
            # the ledger posts up to the cycle's own instant.
            "reconciliation": {"settle_window": 0},
            "ledger": {"ingest_lag": 0},
            # The audit against nova's usage held to seconds, not the default hour: the tier's servers live
            # minutes, and only nova's rounding (2 s a server) and the explained kinds may pass.
            "audit": {"tolerance_hours": 0.01, "tolerance_ratio": 0},
            "api": {"sync_workers": 1},
            "collector": {"pool": POOL, "topics": list(TOPICS), "service_exchanges": SERVICE_EXCHANGES,
                          "batch_timeout": 0.05, "rebind_interval": 1, "reconnect_max_delay": 2,
                          "drain_timeout": 10},
        }
        self.config_path.write_text(yaml.safe_dump(config))

    # ---- processes ----------------------------------------------------------------------------------------

    def start_api(self) -> None:
        self.api = ServeProcess(self.database, tokens_file=self.root / "tokens.yaml", config=self.config_path,
                                log_path=self.root / "serve.log", env=self.env)
        self.api.start()

    def start_collector(self) -> CollectorProcess:
        assert self.api is not None
        self.collector = CollectorProcess(
            cloud=CLOUD, transport_url=self.stack.transport_url, api_url=self.api.url,
            buffer_dir=self.root / "buffer", token_file=self.root / "collector.token", config=self.config_path,
            log_path=self.root / "collector.log", env=self.env)
        # Bound from the first second: the collector declares the exchanges the services have not made yet
        # (glance makes its own only when it first publishes).
        return self.collector.start(bound=len(EXCHANGES), timeout=120)

    def stop_collector(self) -> None:
        if self.collector is not None:
            self.collector.stop()
            self.collector = None

    def forget_queues(self) -> None:
        """Delete the collector's queues while it is stopped: what the services publish until it starts
        again reaches no queue of tally's, so only reconciliation can see it (a collector whose queues were
        lost, or that never ran)."""
        assert self.collector is None, "stop the collector first"
        vhost = self.stack.vhost
        assert vhost is not None
        for topic in TOPICS:
            rabbitmqctl("delete_queue", "-p", vhost.name, f"{POOL}.{topic}")

    def close(self) -> None:
        self.stop_collector()
        if self.api is not None:
            self.api.stop()

    # ---- the CLI ------------------------------------------------------------------------------------------

    def tally(self, *args: str, ok: tuple[int, ...] = (0,), timeout: float = 600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "tally_pipeline", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode in ok, (f"tally {' '.join(args)} exited {proc.returncode}\n"
                                       f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
        return proc

    def sync(self, cloud: str = CLOUD, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
        return json.loads(self.tally("sync", cloud, "--json", ok=ok).stdout)

    # ---- reading back through the API ---------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        assert self.api is not None
        answer = httpx.get(self.api.url + path, params=params, timeout=60,
                           headers={"Authorization": f"Bearer {self.token}"})
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        return answer.json()

    def events(self, resource_type: str, resource_id: str) -> list[dict[str, Any]]:
        found = self.get(f"/v1/resources/{CLOUD}/{resource_type}/{resource_id}/events")
        return [] if found is None else found["events"]

    def lifecycle(self, resource_type: str, resource_id: str) -> list[Interval]:
        found = self.get(f"/v1/resources/{CLOUD}/{resource_type}/{resource_id}/lifecycle")
        return [] if found is None else [Interval.of(i) for i in found["intervals"]]

    def inventory(self, resource_type: str) -> set[str]:
        ids: set[str] = set()
        cursor = None
        while True:
            page = self.get("/v1/inventory", cloud=CLOUD, resource_type=resource_type, limit=500,
                            **({"cursor": cursor} if cursor else {}))
            ids |= {r["resource_id"] for r in page["resources"]}
            cursor = page.get("next_cursor")
            if not cursor:
                return ids

    def wait_for_events(self, resource_type: str, resource_id: str, event_types: set[str],
                        timeout: float = 180) -> list[dict[str, Any]]:
        """The resource's events once the collector has stored one of each of ``event_types``."""
        def arrived() -> list[dict[str, Any]] | None:
            events = self.events(resource_type, resource_id)
            return events if event_types <= {e["event_type"] for e in events} else None

        wait_until(arrived, f"{sorted(event_types)} of {resource_type} {resource_id} stored", timeout)
        return self.events(resource_type, resource_id)


@dataclass(frozen=True)
class Interval:
    start: float
    end: float | None
    size: dict[str, Any]
    status: str | None
    lifecycle: int

    @classmethod
    def of(cls, row: dict[str, Any]) -> Interval:
        return cls(epoch(row["start"]), epoch(row["end"]) if row["end"] else None, row["size"] or {},
                   row.get("platform_status"), row.get("lifecycle") or 0)


def epoch(value: str | None) -> float:
    """Seconds since the epoch of a tally or an OpenStack timestamp (nova's ``launched_at`` has no offset: UTC)."""
    assert value, "no timestamp"
    text = value if value.endswith("Z") or "+" in value[10:] or value[10:].count("-") else value + "Z"
    return parse_rfc3339(text.replace(" ", "T")).timestamp()


def wait_status(fetch: Callable[[], Any], wanted: str, timeout: float = 300) -> Any:
    """Poll an openstacksdk resource until its status is ``wanted`` (ERROR is an answer too, never waited out)."""
    def reached() -> Any:
        current = fetch()
        if current.status.upper() in (wanted.upper(), "ERROR"):
            return current
        return None

    found = wait_until(reached, f"status {wanted}", timeout)
    assert found.status.upper() == wanted.upper(), f"status {found.status}, not {wanted}"
    return found


@contextmanager
def running_product(stack: Stack, root: Path, database: str) -> Iterator[Product]:
    product = Product(stack=stack, root=root, database=migrate(database))
    product.write_files()
    try:
        product.start_api()
        product.start_collector()
        yield product
    finally:
        product.close()
