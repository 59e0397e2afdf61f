import json

import pytest

from tally_pipeline.core.envelope import EventRecord, Rejection, validate_event
from tally_pipeline.core.registry import RegistryError
from tally_pipeline.schemas import load_registry
from tally_pipeline_tests.events import event


def test_packaged_types_and_meters() -> None:
    registry = load_registry()
    assert set(registry.names) == {"instance", "volume", "floating_ip", "image", "load_balancer"}
    meters = {m.name: m for m in registry.meters()}
    assert {"instance_hours", "vcpu_hours", "ram_gb_hours", "volume_gb_hours", "floating_ip_hours",
            "image_gb_hours", "load_balancer_hours"} <= set(meters)
    assert meters["ram_gb_hours"].per == "ram_mb" and meters["ram_gb_hours"].divisor == 1024


def test_directory_adds_and_overrides_types(tmp_path) -> None:
    (tmp_path / "gpu.json").write_text(json.dumps({
        "resource_type": "gpu",
        "size": {"type": "object", "properties": {"model": {"type": "string"}}, "required": ["model"]},
        "meters": {"gpu_hours": {"unit": "hour"}},
    }))
    (tmp_path / "volume.json").write_text(json.dumps({
        "resource_type": "volume",
        "size": {"type": "object", "properties": {"gb": {"type": "integer", "maximum": 100}}, "required": ["gb"]},
    }))
    registry = load_registry(tmp_path)
    assert "gpu" in registry.names
    ok = validate_event(event(resource_type="gpu", payload={"size": {"model": "a100"}}), registry)
    assert isinstance(ok, EventRecord)
    too_big = validate_event(event(resource_type="volume", payload={"size": {"gb": 500}}), registry)
    assert isinstance(too_big, Rejection) and too_big.reason == "size_schema"
    assert registry["volume"].meters == ()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"resource_type": "x", "size": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "not valid JSON Schema"),
        ({"resource_type": "x", "size": {"type": "string"}}, "must describe an object"),
        ({"resource_type": "x", "size": {"type": "object"}, "meters": {"m": {"unit": "h", "divisor": 0}}}, "divisor"),
        ({"resource_type": "Bad Name", "size": {"type": "object"}}, "resource_type"),
        ({"size": {"type": "object"}}, "resource_type"),
    ],
)
def test_bad_definitions_are_refused_with_the_file_named(tmp_path, content, message) -> None:
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(content))
    with pytest.raises(RegistryError) as exc:
        load_registry(tmp_path)
    assert message in str(exc.value) and "broken.json" in str(exc.value)


def test_a_format_error_is_caught_by_the_fast_engine(tmp_path) -> None:
    (tmp_path / "dated.json").write_text(json.dumps({
        "resource_type": "dated",
        "size": {"type": "object", "properties": {"since": {"type": "string", "format": "date-time"}}},
    }))
    registry = load_registry(tmp_path)
    bad = validate_event(event(resource_type="dated", payload={"size": {"since": "2026-13-01T00:00:00Z"}}), registry)
    assert isinstance(bad, Rejection) and bad.reason == "size_schema"
    good = validate_event(event(resource_type="dated", payload={"size": {"since": "2026-12-01T00:00:00Z"}}), registry)
    assert isinstance(good, EventRecord)


def test_packaged_types_in_generation_order_and_everyone_uses_it() -> None:
    """The five types come from the schemas, in their declared order: the simulator, both OpenStack
    sides and the config's validators read that one list (a seed's events depend on the order)."""
    from tally_pipeline.fakes.openstack_model import RESOURCE_TYPES as fake_types
    from tally_pipeline.providers.openstack.adapter import RESOURCE_TYPES as adapter_types
    from tally_pipeline.providers.simulated.spec import SIMULATED_TYPES, default_profiles

    order = load_registry().in_order
    assert order == ("instance", "volume", "floating_ip", "image", "load_balancer")
    assert SIMULATED_TYPES == adapter_types == fake_types == order
    assert set(default_profiles()) == set(order)


def test_types_without_an_order_come_last_by_name(tmp_path) -> None:
    for name in ("zeta", "alpha"):
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "resource_type": name, "size": {"type": "object"}}))
    assert load_registry(tmp_path).in_order[-2:] == ("alpha", "zeta")
    assert load_registry(tmp_path).in_order[:5] == load_registry().in_order
