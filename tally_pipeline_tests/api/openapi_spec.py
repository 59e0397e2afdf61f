"""``docs/openapi.yaml`` as a test oracle: which routes exist, and whether an answer is one the spec describes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
SPEC_URI = "urn:tally:openapi"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


@cache
def spec() -> dict[str, Any]:
    return yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))


@cache
def _registry() -> Registry:
    return Registry().with_resource(SPEC_URI, Resource.from_contents(spec(), default_specification=DRAFT202012))


def spec_operations() -> set[tuple[str, str]]:
    """Every (path template, METHOD) the spec describes."""
    return {(path, method.upper()) for path, item in spec()["paths"].items() for method in item if method in METHODS}


def app_operations(app: Any) -> set[tuple[str, str]]:
    """Every (path template, METHOD) a Starlette app routes, with ``{name:converter}`` written ``{name}``."""
    found = set()
    for route in app.routes:
        template = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        for method in route.methods or ():
            if method != "HEAD":  # Starlette adds HEAD to every GET by itself
                found.add((template, method))
    return found


def operation(path: str, method: str) -> dict[str, Any]:
    return spec()["paths"][path][method.lower()]


def template_of(concrete_path: str) -> str:
    """The spec's path template a request path falls under (a resource id may hold slashes)."""
    for template in spec()["paths"]:
        pattern = "^" + re.sub(r"\\\{resource_id\\\}", ".+", re.escape(template)) + "$"
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", pattern)
        if re.match(pattern, concrete_path):
            return template
    raise AssertionError(f"{concrete_path} is under no path of docs/openapi.yaml")


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = spec()
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def required_scopes(path: str, method: str) -> list[list[str]] | None:
    """The scope alternatives the spec names for an operation; None when it needs no token."""
    requirements = operation(path, method).get("security", spec().get("security", []))
    if not requirements:
        return None
    return [scopes for requirement in requirements for scopes in requirement.values()]


@dataclass(frozen=True)
class Answer:
    """An HTTP answer as any client saw it."""

    status: int
    headers: dict[str, str]
    body: bytes

    @classmethod
    def of(cls, response: Any) -> Answer:
        return cls(response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content)


def check_answer(method: str, concrete_path: str, response: Any) -> tuple[str, str, int]:
    """Assert that the spec documents this answer (status, media type, headers, body); return (path, METHOD, status)."""
    return check_templated(method, template_of(concrete_path.split("?", 1)[0]), response)


def check_templated(method: str, path: str, response: Any) -> tuple[str, str, int]:
    """``check_answer`` for a request known to fall under the spec's path template ``path``."""
    answer = response if isinstance(response, Answer) else Answer.of(response)
    responses = operation(path, method)["responses"]
    documented = responses.get(str(answer.status))
    assert documented is not None, (
        f"{method} {path} answered {answer.status}, which docs/openapi.yaml does not list: {answer.body[:300]!r}"
    )
    documented = _resolve(documented)
    for name, header in documented.get("headers", {}).items():
        if header.get("required"):
            assert name.lower() in answer.headers, f"{method} {path} {answer.status} lacks the {name} header"
    media = answer.headers.get("content-type", "").split(";")[0].strip()
    content = documented.get("content", {})
    assert media in content, f"{method} {path} {answer.status} sent {media!r}; the spec lists {sorted(content)}"
    schema = content[media].get("schema")
    if schema is not None:
        if media == "application/json":
            value = orjson.loads(answer.body)
        else:
            value = answer.body.decode("utf-8")
        validator = jsonschema.Draft202012Validator(
            {"$id": "urn:tally:answer", **_with_absolute_refs(schema)},
            registry=_registry(),
            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
        )
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        assert not errors, (
            f"{method} {path} {answer.status}: the body does not match docs/openapi.yaml: "
            f"{'/'.join(map(str, errors[0].absolute_path))}: {errors[0].message}"
        )
    return path, method.upper(), answer.status


def _with_absolute_refs(node: Any) -> Any:
    """An inline schema whose ``#/components/...`` references point into the spec document."""
    if isinstance(node, dict):
        return {k: (SPEC_URI + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _with_absolute_refs(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_with_absolute_refs(v) for v in node]
    return node
