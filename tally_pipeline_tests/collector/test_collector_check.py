"""``tally openstack check CLOUD --collector URL``: per service, whether the running collector hears it.

A real ``tally collect openstack`` on a vhost of its own (no exchange exists before it starts) as a RabbitMQ
user that may not read cinder's exchange, oslo.messaging's notifier publishing as glance does, the project's
fake OpenStack for the cloud's side.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tally_pipeline.bench.collector_process import CollectorProcess
from tally_pipeline.bench.oslo_bus import ServicePublishers
from tally_pipeline.cli import main
from tally_pipeline.collector.health import ServiceHearing, hearing
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.providers.openstack.notification_samples import sample
from tally_pipeline_tests.providers.openstack.openstack_cloud import running_fake
from tally_pipeline_tests.providers.openstack.sync_cli import write_config
from tally_pipeline_tests.rabbit import VHost, rabbitmqctl

CLOUD = "region-one"
WITHOUT_OCTAVIA = ["nova=nova", "cinder=openstack", "neutron=neutron", "glance=glance"]


def check(config: Path, collector: str, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["openstack", "check", CLOUD, "--config", str(config), "--collector", collector,
                                       *more])
    return result.exit_code, result.output


def config_for(tmp_path: Path, fake, name: str, **cloud_options) -> Path:
    (tmp_path / name).mkdir()
    return write_config(tmp_path / name, fake, cloud=CLOUD, database=f"duckdb://{tmp_path / 'tally.duckdb'}",
                        cloud_options=cloud_options)


def collector_lines(out: str) -> dict[str, str]:
    """The per-service lines under the check's ``collector …`` line, by service."""
    below = out[out.index("  collector "):].splitlines()[1:]
    return {line.split()[0]: line for line in below}


@pytest.mark.slow
def test_check_says_per_service_whether_the_collector_hears_it(vhost: VHost, tmp_path: Path) -> None:
    user, password = f"tally-collector-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    # every permission the collector needs, but read on cinder's exchange
    readable = r"^(tally\..*|nova|neutron|glance)$"
    rabbitmqctl("set_permissions", "-p", vhost.name, user, r"^(tally\..*|nova|openstack|neutron|glance)$",
                r"^tally\.", readable)
    settings = tmp_path / "collector.yaml"
    settings.write_text(json.dumps({"collector": {"batch_timeout": 0.05}}))
    args = [a for pair in WITHOUT_OCTAVIA for a in ("--service-exchange", pair)]
    publishers = ServicePublishers(vhost.transport_url())
    try:
        with running_fake() as fake, CollectorProcess(
                cloud=CLOUD, transport_url=vhost.transport_url(user, password), api_url="http://127.0.0.1:9",
                buffer_dir=tmp_path / "buffer", config=settings, extra_args=args,
                log_path=tmp_path / "collector.log") as collector:
            collector.start(bound=3)
            publishers.publish("glance", "notifications", sample("glance/image.upload.json"))
            wait_until(lambda: collector.metric("tally_collector_received_total", exchange="glance") == 1,
                       "glance's notification read")

            code, out = check(config_for(tmp_path, fake, "compute-and-images", resource_types=["instance", "image"]),
                              collector.url)
            assert code == 0, out
            assert f"collector {collector.url}/healthz: ok, broker connected" in out
            lines = collector_lines(out)
            assert set(lines) == {"nova", "glance"}
            assert "exchange glance" in lines["glance"] and "bound; last message" in lines["glance"]
            assert "(silent)" not in lines["glance"]
            assert "exchange nova" in lines["nova"] and "bound; no message since the collector started" in lines["nova"]
            assert "deletes by absence ALLOWED" in out  # the rest of the check is still there

            every_type = config_for(tmp_path, fake, "every-type")
            code, out = check(every_type, collector.url)
            assert code == 1, out
            lines = collector_lines(out)
            assert "exchange openstack" in lines["cinder"] and "NOT BOUND: may not be read by this user" in lines["cinder"]
            assert "octavia    NOT HEARD: the collector does not listen for this service" in lines["octavia"]
            code, out = check(every_type, collector.url, "--json")
            assert code == 1
            body = orjson.loads(out)["collector"]["services"]
            assert body["glance"]["bound"] and body["glance"]["recent"] and body["glance"]["problem"] is None
            assert body["cinder"]["resource_types"] == ["volume"] and not body["cinder"]["bound"]
            assert body["cinder"]["problem"] == "exchange 'openstack' not bound: may not be read by this user"
            assert body["octavia"]["exchange"] is None and body["octavia"]["problem"].startswith("the collector does")

            health = collector.health()
            assert health is not None and health["services"]["glance"]["last_message_at"] is not None
            # a fresh vhost: the collector made every exchange it may, as oslo.messaging would
            assert {e: s["declared"] for e, s in health["exchanges"].items()} == {
                "nova": "declared", "openstack": "declared", "neutron": "declared", "glance": "declared"}
            assert health["exchanges"]["glance"]["last_message_at"].endswith("+00:00")
            assert collector.stop() == 0
            code, out = check(every_type, collector.url)
        assert code == 1 and "cannot read the collector's health at" in out
    finally:
        publishers.close()
        rabbitmqctl("delete_user", user)


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
