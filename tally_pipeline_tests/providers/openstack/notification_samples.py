"""The official OpenStack notification samples under fixtures/openstack/notifications (see SOURCES.md there).

Nova's versioned samples share payloads through ``{"$ref": "file.json#", ...overrides}``; they are
resolved here as nova's own sample tests resolve them (nova/tests/json_ref.py): the referenced file,
with the sibling keys merged into it recursively. Nova's samples leave out the message's
``message_id`` and ``timestamp`` (its tests do not compare them); ``versioned_sample`` adds them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tally_pipeline_tests.rabbit import EXCHANGE_OF

SAMPLES = Path(__file__).parents[2] / "fixtures" / "openstack" / "notifications"


def sample(relative: str) -> dict[str, Any]:
    """A sample as stored (ceilometer's and octavia's are whole messages)."""
    return json.loads((SAMPLES / relative).read_text())


def versioned_sample(name: str, *, message_id: str, timestamp: str, **data: Any) -> dict[str, Any]:
    """Nova's ``doc/notification_samples/<name>.json`` resolved, as a whole message.

    ``data`` overrides fields of ``payload["nova_object.data"]`` (a dict value merges recursively).
    """
    path = SAMPLES / "nova" / "versioned" / f"{name}.json"
    message = _resolve(json.loads(path.read_text()), path.parent)
    _merge(message["payload"]["nova_object.data"], data)
    return {"message_id": message_id, "timestamp": timestamp, **message}


def _resolve(obj: Any, base: Path) -> Any:
    if isinstance(obj, list):
        return [_resolve(item, base) for item in obj]
    if not isinstance(obj, dict):
        return obj
    if "$ref" in obj:
        rest = dict(obj)
        target = base / rest.pop("$ref").partition("#")[0]
        resolved = _resolve(json.loads(target.read_text()), target.parent)
        _merge(resolved, _resolve(rest, base))
        return resolved
    return {key: _resolve(value, base) for key, value in obj.items()}


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(into.get(key), dict) and isinstance(value, dict):
            _merge(into[key], value)
        else:
            into[key] = value


def service_samples() -> list[tuple[str, str, dict[str, Any]]]:
    """Every sample as its service publishes it: (control exchange, topic, message). Nova sends its
    legacy format on ``notifications`` and its versioned one on ``versioned_notifications``."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for path in sorted(SAMPLES.rglob("*.json")):
        relative = path.relative_to(SAMPLES)
        if "common_payloads" in relative.parts:
            continue
        if relative.parts[:2] == ("nova", "versioned"):
            message = versioned_sample(path.stem, message_id="given-by-the-notifier", timestamp="given-too")
            found.append(("nova", "versioned_notifications", message))
        else:
            found.append((EXCHANGE_OF[relative.parts[0]], "notifications", sample(str(relative))))
    return found
