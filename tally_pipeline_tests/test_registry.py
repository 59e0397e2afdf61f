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
