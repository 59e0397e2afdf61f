"""A small kustomize renderer for the layout under ``deploy/k8s/`` (no kustomize binary here).

It implements the part of kustomize the layout uses, and refuses everything else, so a layout
that grows a feature this does not know fails its test instead of rendering wrongly:

- a ``Kustomization`` (``kustomize.config.k8s.io/v1beta1``) lists ``resources`` (YAML files, or
  directories holding a Kustomization), ``components`` (directories holding a ``Component``,
  ``kustomize.config.k8s.io/v1alpha1``) and ``patches`` (``path:`` to a strategic-merge patch);
- a ``Component`` lists ``resources`` and ``patches`` the same way;
- order, as kustomize applies it: the resources, then each component (its resources added, then
  its patches applied to everything so far), then the kustomization's own patches;
- a strategic-merge patch names its target by kind and name; maps merge key by key, lists of maps
  that carry a ``name`` (containers, env, volumes, ports…) merge item by item, other lists are replaced.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KINDS = {"Kustomization": "kustomize.config.k8s.io/v1beta1", "Component": "kustomize.config.k8s.io/v1alpha1"}
KNOWN_FIELDS = {"apiVersion", "kind", "resources", "components", "patches"}


class LayoutError(AssertionError):
    """The layout names something that does not exist, or uses what this renderer does not implement."""


def render(directory: Path) -> list[dict[str, Any]]:
    """Every object the kustomization in ``directory`` produces, in order."""
    return _build(directory, expect="Kustomization")


def kustomization(directory: Path) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise LayoutError(f"{directory} holds no kustomization.yaml")
    doc = yaml.safe_load(path.read_text())
    unknown = set(doc) - KNOWN_FIELDS
    if unknown:
        raise LayoutError(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    kind = doc.get("kind")
    if kind not in KINDS or doc.get("apiVersion") != KINDS[kind]:
        raise LayoutError(f"{path}: kind {kind!r} with apiVersion {doc.get('apiVersion')!r}")
    return doc


def _build(directory: Path, *, expect: str) -> list[dict[str, Any]]:
    doc = kustomization(directory)
    if doc["kind"] != expect:
        raise LayoutError(f"{directory}: a {doc['kind']} where a {expect} belongs")
    objects: list[dict[str, Any]] = []
    for entry in doc.get("resources", []):
        path = _existing(directory, entry)
        objects += _build(path, expect="Kustomization") if path.is_dir() else _documents(path)
    for entry in doc.get("components", []):
        component = _existing(directory, entry)
        if not component.is_dir():
            raise LayoutError(f"{directory}: component {entry} is not a directory")
        objects += _build(component, expect="Component")
        objects = _patched(objects, component, kustomization(component).get("patches", []))
    if doc["kind"] == "Kustomization":
        objects = _patched(objects, directory, doc.get("patches", []))
    _unique(objects, directory)
    return objects


def _existing(directory: Path, entry: str) -> Path:
    path = (directory / entry).resolve()
    if not path.exists():
        raise LayoutError(f"{directory / 'kustomization.yaml'} names {entry}, which does not exist")
    return path


def _documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for doc in docs:
        if not {"apiVersion", "kind", "metadata"} <= set(doc) or "name" not in doc["metadata"]:
            raise LayoutError(f"{path}: an object without apiVersion, kind and metadata.name")
    return docs


def _unique(objects: list[dict[str, Any]], directory: Path) -> None:
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in seen:
            raise LayoutError(f"{directory}: {key[0]} {key[1]} twice")
        seen.add(key)


def _patched(objects: list[dict[str, Any]], directory: Path, patches: list[Any]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for entry in patches:
        if not isinstance(entry, dict) or set(entry) != {"path"}:
            raise LayoutError(f"{directory}: only `patches: [{{path: FILE}}]` is implemented, not {entry!r}")
        for patch in _documents(_existing(directory, entry["path"])):
            targets = [o for o in out if (o["kind"], o["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])]
            if len(targets) != 1:
                raise LayoutError(f"{directory}: patch {entry['path']} matches {len(targets)} objects, not one")
            merge(targets[0], patch)
    return out


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Apply a strategic-merge ``patch`` to ``target`` in place (the subset the module's text describes)."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif isinstance(value, list) and isinstance(target.get(key), list) and _named(value) and _named(target[key]):
            by_name = {item["name"]: item for item in target[key]}
            for item in value:
                if item["name"] in by_name:
                    merge(by_name[item["name"]], item)
                else:
                    target[key].append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, dict) and "name" in item for item in items)
