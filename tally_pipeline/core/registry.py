"""The size-schema registry: which resource types exist, what a size looks like, which meters each has.

Built from plain definitions (``tally_pipeline.schemas`` loads them from files). Each type's JSON
Schema is checked once and compiled once; every distinct size object is validated once and then
remembered, because sizes repeat (a cloud has a handful of flavors and millions of events).

The registry also owns the form a size is stored in: JSON Schema counts ``2.0`` and ``1e1`` as
integers, but the meters read only JSON integers, so every whole-number float in a size (at any
depth, whatever its type's schema) is stored as that integer. A non-whole value in an integer
field stays a float and the schema refuses it. What is stored is what the meters read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import fastjsonschema
import jsonschema
import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from tally_pipeline.core.errors import ConfigurationError


class RegistryError(ConfigurationError, ValueError):
    """A type definition that cannot be used (bad JSON Schema, bad meter)."""


#: A platform status as a billing policy names it: as events carry it (the platform's and reconciliation's
#: are lower-case), and never with a comma (the SQL meters match it inside a comma-joined list).
STATUS_NAME = r"^[^,\s]{1,64}$"


class _MeterDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unit: str = Field(min_length=1)
    per: str | None = None
    divisor: int = Field(default=1, ge=1)
    description: str = ""
    unbilled_statuses: list[Annotated[str, StringConstraints(pattern=STATUS_NAME)]] = Field(default_factory=list)


class _TypeDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource_type: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    description: str = ""
    size: dict[str, Any]
    meters: dict[str, _MeterDef] = Field(default_factory=dict)
    #: Where the type comes in ``SizeSchemaRegistry.in_order`` (the simulator generates in this order,
    #: so it is part of a seed's determinism); types without one come after, by name.
    order: int | None = None


@dataclass(frozen=True)
class Meter:
    """A rate over a lifecycle interval: ``size[per] / divisor`` units per hour (1 when ``per`` is None)."""

    name: str
    resource_type: str
    unit: str
    per: str | None = None
    divisor: int = 1
    description: str = ""
    #: Platform statuses this meter does not bill (an interval in one uses nothing). Every other
    #: status is billed, and so is an interval with no status: a policy removes only what it names,
    #: so a status nobody listed (a new one, an event that gave none) is never silently free.
    unbilled_statuses: frozenset[str] = frozenset()

    def bills(self, status: str | None) -> bool:
        """Whether an interval in ``status`` (None: none given) uses this meter."""
        return status is None or status not in self.unbilled_statuses


@dataclass
class ResourceType:
    name: str
    description: str
    size_schema: dict[str, Any]
    meters: tuple[Meter, ...]
    _compiled: Callable[[Any], Any] = field(repr=False)
    _explain: jsonschema.protocols.Validator = field(repr=False)
    _valid_sizes: dict[bytes, Any] = field(default_factory=dict, repr=False)
    order: int | None = None

    def size_error(self, size: Any) -> str | None:
        """Return None when ``size`` satisfies the schema, else a message naming the offending field."""
        return self.checked_size(size)[1]

    def checked_size(self, size: Any) -> tuple[Any, str | None]:
        """``size`` in its stored form (whole-number floats as integers) and None when it satisfies the
        schema; else ``size`` unchanged and a message naming the offending field.

        A valid size is remembered by its JSON text, with its stored form when that differs (True
        when the size is stored as sent): the stored form is shared by every event that sends the
        same text, and nothing changes it afterwards.
        """
        try:
            key: bytes | None = orjson.dumps(size, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            key = None  # not storable as JSON (an integer beyond 64 bits): checked, never remembered
        if key is not None:
            known = self._valid_sizes.get(key)
            if known is True:
                return size, None
            if known is not None:
                return known, None
        stored = whole_floats_as_ints(size)
        if stored is _OUT_OF_RANGE:
            return size, "size: a whole number beyond the 64-bit integer range cannot be stored as an integer"
        try:
            self._compiled(stored)
        except fastjsonschema.JsonSchemaException:
            return size, self._describe(stored)
        if key is not None and len(self._valid_sizes) < 100_000:  # bounded: sizes are few, but don't trust that
            self._valid_sizes[key] = True if stored is size else stored
        return stored, None

    def _describe(self, size: Any) -> str:
        error = jsonschema.exceptions.best_match(self._explain.iter_errors(size))
        if error is None:  # the two engines disagree; report the fast engine's verdict plainly
            return "size does not match the schema"
        where = ".".join(str(p) for p in error.absolute_path)
        if not where and error.validator in ("required", "additionalProperties"):
            return str(error.message)
        return f"{where or 'size'}: {error.message}"


_INT64_LIMIT = 2**63
_OUT_OF_RANGE: Any = object()


def whole_floats_as_ints(value: Any) -> Any:
    """``value`` with every whole-number float made an integer (``2.0`` → ``2``); the same object when
    nothing changes. A whole float beyond the 64-bit integer range cannot be stored as an integer:
    ``_OUT_OF_RANGE`` is returned then (infinities and NaN are not whole, and stay as they are)."""
    if type(value) is float:
        if not value.is_integer():
            return value
        if -_INT64_LIMIT <= value < _INT64_LIMIT:
            return int(value)
        return _OUT_OF_RANGE
    if isinstance(value, dict):
        changed: dict[Any, Any] | None = None
        for k, inner in value.items():
            stored = whole_floats_as_ints(inner)
            if stored is _OUT_OF_RANGE:
                return _OUT_OF_RANGE
            if stored is not inner:
                if changed is None:
                    changed = dict(value)
                changed[k] = stored
        return value if changed is None else changed
    if isinstance(value, list):
        items = [whole_floats_as_ints(inner) for inner in value]
        if any(i is _OUT_OF_RANGE for i in items):
            return _OUT_OF_RANGE
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


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
        """Alphabetical."""
        return tuple(self._types)

    @property
    def in_order(self) -> tuple[str, ...]:
        """By each type's ``order``, then those without one by name: a stable order that does not
        change when a type is added (the simulator's generation order)."""
        def key(name: str) -> tuple[bool, int, str]:
            order = self._types[name].order
            return (order is None, order or 0, name)

        return tuple(sorted(self._types, key=key))

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __getitem__(self, name: str) -> ResourceType:
        return self._types[name]

    def meters(self) -> tuple[Meter, ...]:
        return tuple(m for t in self._types.values() for m in t.meters)

    def with_unbilled_statuses(self, policy: Mapping[str, Iterable[str]]) -> SizeSchemaRegistry:
        """A registry whose named meters bill every status but ``policy[meter]`` (the configuration's
        ``meters`` section); the others keep their schema's. An unknown meter name is an error."""
        known = {m.name for m in self.meters()}
        unknown = sorted(set(policy) - known)
        if unknown:
            raise RegistryError(f"meters: {', '.join(unknown)} not registered (known: {', '.join(sorted(known))})")
        copy = object.__new__(SizeSchemaRegistry)
        copy._types = {
            name: dataclasses.replace(t, meters=tuple(
                dataclasses.replace(m, unbilled_statuses=frozenset(policy[m.name])) if m.name in policy else m
                for m in t.meters))
            for name, t in self._types.items()
        }
        return copy


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
        Meter(name, parsed.resource_type, m.unit, m.per, m.divisor, m.description, frozenset(m.unbilled_statuses))
        for name, m in sorted(parsed.meters.items())
    )
    return ResourceType(parsed.resource_type, parsed.description, parsed.size, meters, compiled, explain,
                        order=parsed.order)
