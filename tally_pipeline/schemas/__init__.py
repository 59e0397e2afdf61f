"""Size schemas shipped as package data, and the loader that merges a deployment's own directory over them."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from tally_pipeline.core.registry import RegistryError, SizeSchemaRegistry


def _read(path: Path | resources.abc.Traversable, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RegistryError(f"{origin}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{origin}: expected a JSON object")
    return data


def load_registry(override_dir: str | Path | None = None) -> SizeSchemaRegistry:
    """The packaged types, with every ``*.json`` in ``override_dir`` adding a type or replacing one."""
    by_type: dict[str, tuple[str, dict[str, Any]]] = {}
    packaged = resources.files(__package__)
    for entry in sorted(packaged.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = _read(entry, entry.name)
            by_type[str(data.get("resource_type"))] = (entry.name, data)
    if override_dir is not None:
        directory = Path(override_dir)
        if not directory.is_dir():
            raise RegistryError(f"schemas_dir {str(directory)!r} is not a directory")
        for path in sorted(directory.glob("*.json")):
            data = _read(path, str(path))
            by_type[str(data.get("resource_type"))] = (str(path), data)
    return SizeSchemaRegistry({origin: data for origin, data in by_type.values()})


_default: SizeSchemaRegistry | None = None


def default_registry() -> SizeSchemaRegistry:
    """The packaged registry, loaded once per process."""
    global _default
    if _default is None:
        _default = load_registry()
    return _default
