"""The adapter against the services' own API samples (see fixtures/openstack/api/SOURCES.md), and the
fake OpenStack held to the same shapes: it renders no field the real service lacks, with the same
JSON types and timestamp formats."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tally_pipeline.fakes import openstack_json as render
from tally_pipeline.providers.interface import SkipItem
from tally_pipeline.providers.openstack import records
from tally_pipeline.providers.openstack.adapter import _confirmation
from tally_pipeline.providers.simulated.platform import PlatformRecord

SAMPLES = Path(__file__).parents[2] / "fixtures" / "openstack" / "api"
AT = datetime(2026, 1, 1, 8, 30, 15, 123456, tzinfo=UTC)


def sample(name: str, key: str | None = None) -> Any:
    body = json.loads((SAMPLES / name).read_text())
    return body if key is None else body[key]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("name", ["nova-v2.47-servers-details-resp.json", "nova-v2.96-servers-details-resp.json"])
def test_nova_servers_with_the_embedded_flavor(name: str) -> None:
    raw = sample(name, "servers")[0]
    listed = records.server(raw)
    flavor = raw["flavor"]
    assert listed.size == {"flavor_name": flavor["original_name"], "vcpus": flavor["vcpus"], "ram_mb": flavor["ram"],
                           "disk_gb": flavor["disk"]}
    assert (listed.resource_id, listed.project_id, listed.unknown) == (raw["id"], raw["tenant_id"], False)
    assert listed.created_at == utc(raw["created"].rstrip("Z"))


def test_a_nova_2_1_server_without_its_flavor_is_skipped_not_guessed() -> None:
    raw = sample("nova-v2.1-servers-details-resp.json", "servers")[0]
    with pytest.raises(SkipItem) as caught:
        records.server(raw)
    assert (caught.value.item.resource_id, caught.value.item.reason) == (raw["id"], "malformed")


def test_a_2_69_down_cell_record_is_present_with_its_size_unknown() -> None:
    raw = sample("nova-v2.69-servers-details-resp.json", "servers")[0]
    listed = records.server(raw)
    assert (listed.resource_id, listed.project_id, listed.status, listed.unknown, listed.size) == (
        raw["id"], raw["tenant_id"], "UNKNOWN", True, {})


class Answer:
    """What ``_confirmation`` reads of an HTTP response."""

    def __init__(self, status_code: int, body: Any):
        self.status_code, self._body = status_code, body

    def json(self) -> Any:
        return self._body


def test_a_2_69_down_cell_server_asked_by_id_is_not_confirmed_gone() -> None:
    body = sample("nova-v2.69-server-get-resp.json")
    answer = _confirmation("instance", body["server"]["id"], "compute", "server", Answer(200, body))
    assert not answer.gone and "UNKNOWN" in answer.detail


@pytest.mark.parametrize(("name", "key", "rtype"), [
    ("cinder-v3.69-volume-show-response.json", "volume", "volume"),
    ("neutron-floatingip-show-response.json", "floatingip", "floating_ip"),
    ("glance-image-show-response.json", None, "image"),
    ("octavia-loadbalancer-show-response.json", "loadbalancer", "load_balancer"),
])
def test_a_resource_shown_by_id_still_answers(name: str, key: str | None, rtype: str) -> None:
    body = sample(name)
    rid = (body if key is None else body[key])["id"]
    assert not _confirmation(rtype, rid, rtype, key, Answer(200, body)).gone
    assert _confirmation(rtype, rid, rtype, key, Answer(404, {})).gone


def test_cinder_volumes() -> None:
    raw = sample("cinder-v3.69-volumes-list-detailed-response.json", "volumes")[0]
    listed = records.volume(raw)
    assert listed.size == {"gb": raw["size"], "volume_type": raw["volume_type"]}
    assert listed.project_id == raw["os-vol-tenant-attr:tenant_id"]
    assert listed.created_at == utc(raw["created_at"]) and listed.in_transition  # the sample is "creating"


def test_neutron_floating_ips() -> None:
    raws = sample("neutron-floating-ips-list-response.json", "floatingips")
    listed = [records.floating_ip(raw) for raw in raws]
    assert [(x.resource_id, x.project_id, x.status) for x in listed] == [
        (r["id"], r["project_id"], r["status"]) for r in raws]
    bare = {k: v for k, v in raws[0].items() if k not in ("created_at", "updated_at")}
    with pytest.raises(SkipItem) as caught:  # neutron without its timestamp extension
        records.floating_ip(bare)
    assert caught.value.item.reason == "no_created_at"


def test_glance_images() -> None:
    raws = sample("glance-images-list-response.json", "images")
    listed = [records.image(raw) for raw in raws]
    assert [(x.resource_id, x.project_id, x.size) for x in listed] == [
        (r["id"], r["owner"], {"bytes": r["size"]}) for r in raws]
    with pytest.raises(SkipItem) as caught:  # glance's schema allows a null owner
        records.image({**raws[0], "owner": None})
    assert caught.value.item.reason == "no_project"


def test_octavia_load_balancers() -> None:
    raw = sample("octavia-loadbalancers-list-response.json", "loadbalancers")[0]
    listed = records.load_balancer(raw)
    assert (listed.resource_id, listed.project_id, listed.status) == (raw["id"], raw["project_id"],
                                                                     raw["provisioning_status"])
    assert listed.created_at == utc(raw["created_at"])


# --- the fake, held to the samples' shapes ------------------------------------------------------


def _record(rtype: str, size: dict[str, Any]) -> PlatformRecord:
    return PlatformRecord(rtype, "00000000-0000-4000-8000-000000000001", "p1", size, "ACTIVE", None, AT, AT)


FLAVOR = {"flavor_name": "m1.tiny", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}
RENDERED = {
    "nova-v2.47-servers-details-resp.json": ("servers", lambda: render.server_json(
        _record("instance", FLAVOR), microversion=(2, 47), base_url="http://x/v2.1")),
    "nova-v2.96-servers-details-resp.json": ("servers", lambda: render.server_json(
        _record("instance", FLAVOR), microversion=(2, 96), base_url="http://x/v2.1")),
    "nova-v2.69-servers-details-resp.json": ("servers", lambda: render.server_unknown_json(
        _record("instance", FLAVOR), base_url="http://x/v2.1")),
    "cinder-v3.69-volumes-list-detailed-response.json": ("volumes", lambda: render.volume_json(
        _record("volume", {"gb": 10, "volume_type": "ssd"}), base_url="http://x/v3/p1")),
    "neutron-floating-ips-list-response.json": ("floatingips", lambda: render.floating_ip_json(
        _record("floating_ip", {"floating_network_id": "net"}))),
    "glance-images-list-response.json": ("images", lambda: render.image_json(_record("image", {"bytes": 1}))),
    "octavia-loadbalancers-list-response.json": ("loadbalancers", lambda: render.load_balancer_json(
        _record("load_balancer", {"flavor_id": "f"}))),
}
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT")


def _shape(value: Any) -> str:
    """A timestamp's format (digits masked), else the JSON type."""
    if isinstance(value, str) and _TIME.match(value):
        return re.sub(r"\d", "d", value)
    return type(value).__name__


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_the_fake_renders_the_services_own_fields_types_and_time_formats(name: str) -> None:
    key, make = RENDERED[name]
    real = sample(name, key)[0]
    fake = make()
    assert set(fake) <= set(real), f"the fake invents {sorted(set(fake) - set(real))}"
    differ = {k: (_shape(fake[k]), _shape(real[k])) for k in fake
              if fake[k] is not None and real[k] is not None and _shape(fake[k]) != _shape(real[k])}
    assert not differ
