"""``tally openstack check CLOUD --collector URL``: per service, whether the running collector hears it.

A real ``tally collect openstack`` on a vhost of its own (no exchange exists before it starts), oslo.messaging's
notifier publishing as cinder does (on ``openstack``), the project's fake OpenStack for the cloud's side.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tally_pipeline.bench.collector_process import CollectorProcess
from tally_pipeline.bench.oslo_bus import ServicePublishers
from tally_pipeline.cli import main
from tally_pipeline.collector.health import ServiceHearing, hearing
from tally_pipeline_tests.adapters.openstack_cloud import running_fake
from tally_pipeline_tests.adapters.sync_cli import write_config
from tally_pipeline_tests.collector.openstack_samples import sample
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.rabbit import VHost

CLOUD = "region-one"
WITHOUT_OCTAVIA = ["nova=nova", "cinder=openstack", "neutron=neutron", "glance=glance"]


def check(config: Path, collector: str, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["openstack", "check", CLOUD, "--config", str(config), "--collector", collector,
                                       *more])
    return result.exit_code, result.output


@pytest.mark.slow
def test_check_says_per_service_whether_the_collector_hears_it(vhost: VHost, tmp_path: Path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    settings = tmp_path / "collector.yaml"
    settings.write_text(json.dumps({"collector": {"batch_timeout": 0.05}}))
    args = [a for pair in WITHOUT_OCTAVIA for a in ("--service-exchange", pair)]
    publishers = ServicePublishers(vhost.transport_url())
    with running_fake() as fake, CollectorProcess(
            cloud=CLOUD, transport_url=vhost.transport_url(), api_url="http://127.0.0.1:9",
            buffer_dir=tmp_path / "buffer", config=settings, extra_args=args,
            log_path=tmp_path / "collector.log") as collector:
        try:
            collector.start(bound=4)
            publishers.publish("openstack", "notifications", sample("cinder/volume.create.end.json"))
            wait_until(lambda: collector.metric("tally_collector_received_total", exchange="openstack") == 1,
                       "cinder's notification read")
            without_lb = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                                      cloud_options={"resource_types": ["instance", "volume", "floating_ip", "image"]})
            code, out = check(without_lb, collector.url)
            assert code == 0, out
            assert f"collector {collector.url}/healthz: ok, broker connected" in out
            lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("    ")}
            assert "exchange openstack" in lines["cinder"] and "bound; last message" in lines["cinder"]
            assert "(silent)" not in lines["cinder"]
            assert "exchange nova" in lines["nova"] and "no message since the collector started" in lines["nova"]
            assert "octavia" not in lines
            assert "deletes by absence ALLOWED" in out  # the rest of the check is still there

            (tmp_path / "every-type").mkdir()
            every_type = write_config(tmp_path / "every-type", fake, cloud=CLOUD, database=database)
            code, out = check(every_type, collector.url)
            assert code == 1, out
            assert "octavia    NOT HEARD: the collector does not listen for this service" in out
            code, out = check(every_type, collector.url, "--json")
            body = orjson.loads(out)["collector"]
            assert body["services"]["cinder"]["exchange"] == "openstack"
            assert body["services"]["cinder"]["bound"] and body["services"]["cinder"]["recent"]
            assert body["services"]["cinder"]["resource_types"] == ["volume"]
            assert body["services"]["octavia"]["problem"].startswith("the collector does not listen")
            health = collector.health()
            assert health is not None and health["services"]["cinder"]["last_message_at"] is not None
            # a fresh vhost: the collector made every exchange it binds, as oslo.messaging would
            assert {e["declared"] for e in health["exchanges"].values()} == {"declared"}
            assert health["exchanges"]["openstack"]["last_message_at"].endswith("+00:00")
            assert "octavia" not in health["exchanges"]
        finally:
            publishers.close()
        assert collector.stop() == 0
        code, out = check(every_type, collector.url)
    assert code == 1 and "cannot read the collector's health at" in out


def test_an_unbound_exchange_is_named_and_silence_is_told_apart() -> None:
    health = {"services": {
        "nova": {"exchange": "nova", "bound": True, "last_message_age_seconds": 7200.0},
        "cinder": {"exchange": "openstack", "bound": False, "why_unbound": "may not be read by this user",
                   "last_message_age_seconds": None},
        "glance": {"exchange": "glance", "bound": True, "mismatch": "PRECONDITION_FAILED - inequivalent arg "
                   "'durable'", "last_message_age_seconds": 5},
    }}
    got = {h.service: h for h in hearing(health, ["instance", "volume", "image", "load_balancer"])}
    assert got["nova"].problem is None and not got["nova"].recent
    assert got["cinder"].problem == "exchange 'openstack' not bound: may not be read by this user"
    assert got["glance"].problem is None and got["glance"].recent and got["glance"].mismatch
    assert got["octavia"] == ServiceHearing("octavia", ("load_balancer",), None, False, None, None, None, False)
    assert got["octavia"].problem is not None
