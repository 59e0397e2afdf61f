"""The size-schema registry: which resource types exist, what a size looks like, which meters each has.

Built from plain definitions (``tally_pipeline.schemas`` loads them from files). Each type's JSON
Schema is checked once and compiled once; every distinct size object is validated once and then
remembered, because sizes repeat (a cloud has a handful of flavors and millions of events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import fastjsonschema
import jsonschema
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class RegistryError(ValueError):
    """A type definition that cannot be used (bad JSON Schema, bad meter)."""


class _MeterDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unit: str = Field(min_length=1)
    per: str | None = None
    divisor: int = Field(default=1, ge=1)
    description: str = ""


class _TypeDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource_type: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    description: str = ""
    size: dict[str, Any]
    meters: dict[str, _MeterDef] = Field(default_factory=dict)


@dataclass(frozen=True)
class Meter:
    """A rate over a lifecycle interval: ``size[per] / divisor`` units per hour (1 when ``per`` is None)."""

    name: str
    resource_type: str
    unit: str
    per: str | None = None
    divisor: int = 1
    description: str = ""


@dataclass
class ResourceType:
    name: str
    description: str
    size_schema: dict[str, Any]
    meters: tuple[Meter, ...]
    _compiled: Callable[[Any], Any] = field(repr=False)
    _explain: jsonschema.protocols.Validator = field(repr=False)
    _valid_sizes: dict[bytes, bool] = field(default_factory=dict, repr=False)

    def size_error(self, size: Any) -> str | None:
        """Return None when ``size`` satisfies the schema, else a message naming the offending field."""
        try:
            key: bytes | None = orjson.dumps(size, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            key = None  # not storable as JSON (an integer beyond 64 bits): checked, never remembered
        if key is not None and self._valid_sizes.get(key):
            return None
        try:
            self._compiled(size)
        except fastjsonschema.JsonSchemaException:
            return self._describe(size)
        if key is not None and len(self._valid_sizes) < 100_000:  # bounded: sizes are few, but don't trust that
            self._valid_sizes[key] = True
        return None

    def _describe(self, size: Any) -> str:
        error = jsonschema.exceptions.best_match(self._explain.iter_errors(size))
        if error is None:  # the two engines disagree; report the fast engine's verdict plainly
            return "size does not match the schema"
        where = ".".join(str(p) for p in error.absolute_path)
        if not where and error.validator == "required":
            return error.message
        if not where and error.validator == "additionalProperties":
            return error.message
        return f"{where or 'size'}: {error.message}"


class SizeSchemaRegistry:
    """Registered resource types, their size schemas and meters."""

    def __init__(self, definitions: Mapping[str, Mapping[str, Any]]):
        types: dict[str, ResourceType] = {}
        for origin, raw in definitions.items():
            types_def = _parse(origin, raw)
            types[types_def.name] = types_def
        self._types = dict(sorted(types.items()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __getitem__(self, name: str) -> ResourceType:
        return self._types[name]

    def meters(self) -> tuple[Meter, ...]:
        return tuple(m for t in self._types.values() for m in t.meters)


def _parse(origin: str, raw: Mapping[str, Any]) -> ResourceType:
    try:
        parsed = _TypeDef.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RegistryError(f"{origin}: {where}: {first['msg']}") from None
    validator_cls = jsonschema.validators.validator_for(parsed.size, default=jsonschema.Draft7Validator)
    try:
        validator_cls.check_schema(parsed.size)
    except jsonschema.SchemaError as exc:
        raise RegistryError(f"{origin}: size schema is not valid JSON Schema: {exc.message}") from None
    if parsed.size.get("type") != "object":
        raise RegistryError(f"{origin}: size schema must describe an object (type: object)")
    try:
        compiled = fastjsonschema.compile(parsed.size)
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise RegistryError(f"{origin}: size schema cannot be compiled: {exc}") from None
    explain = validator_cls(parsed.size, format_checker=validator_cls.FORMAT_CHECKER)
    meters = tuple(
        Meter(name, parsed.resource_type, m.unit, m.per, m.divisor, m.description)
        for name, m in sorted(parsed.meters.items())
    )
    return ResourceType(parsed.resource_type, parsed.description, parsed.size, meters, compiled, explain)
