"""Credentials taken out of a bus message before anything keeps or prints it.

oslo.messaging packs the sender's request context into every notification as ``_context_*`` fields
(``pack_context``): beside who and which request, that is the user's Keystone token
(``_context_auth_token``), a service token, the token's whole body (``_context_auth_token_info``)
and whatever else a service puts in its context. A rejected message is kept in the rejected log,
shown by ``tally collector rejected``: so the context is masked first.

The rule is an allow-list: a ``_context_`` field keeps its value only when its name is one of the
identifiers below (who, which project, which request); every other one, known or not, becomes
``***``, at any depth, in the oslo.messaging envelope's inner message too. What the allow-list
keeps, and every other string, is then redacted by shape (passwords in URLs such as a transport
URL, ``Bearer`` credentials, the collector's own broker password). A body that is not JSON cannot be
walked: it is kept up to its first ``_context_`` field that is not allow-listed, and the rest is
withheld. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tally_pipeline.redaction import MASK, redact

CONTEXT_PREFIX = "_context_"
#: Context fields that name who sent a message and for which request: never a credential.
SAFE_CONTEXT_FIELDS = frozenset((
    "user", "user_id", "user_name", "user_domain", "user_domain_id", "user_domain_name",
    "tenant", "tenant_id", "tenant_name", "project", "project_id", "project_name", "project_domain",
    "project_domain_id", "project_domain_name", "domain", "domain_id", "domain_name", "system_scope",
    "roles", "is_admin", "is_admin_project", "read_only", "show_deleted", "read_deleted",
    "request_id", "global_request_id", "resource_uuid", "timestamp", "quota_class", "remote_address",
    "service_user_id", "service_user_name", "service_user_domain_id", "service_user_domain_name",
    "service_project_id", "service_project_name", "service_project_domain_id",
    "service_project_domain_name", "service_roles", "instance_lock_checked", "overwrite",
))
_ENVELOPE_MESSAGE = "oslo.message"
# In text that is not JSON: a context field's name, its underscore possibly escaped (\u005f).
_CONTEXT_NAME = re.compile(r"(?:_|\\u005[fF])context_([A-Za-z0-9_]*)")
_KEY_END = re.compile(r'\\{0,8}"')  # the name's closing quote, escaped as often as it is nested


def scrub_body(body: bytes) -> str:
    """The body as text, with every credential a bus message can carry masked (see the module)."""
    text = body.decode("utf-8", "backslashreplace")
    try:
        value = json.loads(text, parse_float=_Raw, parse_int=_int_or_raw, parse_constant=_Raw)
    except (ValueError, RecursionError):
        return redact(_withhold_context(text))
    try:
        clean, changed = _clean(value)
        return redact(_dumps(clean) if changed else text)
    except RecursionError:
        return redact(_withhold_context(text))


class _Raw(str):
    """A number as written (so a number no float holds is kept, not rewritten)."""


def _int_or_raw(text: str) -> Any:
    return _Raw(text)


def _clean(value: Any) -> tuple[Any, bool]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            if key.startswith(CONTEXT_PREFIX) and key[len(CONTEXT_PREFIX):] not in SAFE_CONTEXT_FIELDS:
                out[key] = MASK if item not in (None, "") else item
                changed = changed or out[key] is not item
                continue
            if key == _ENVELOPE_MESSAGE and type(item) is str:
                inner = scrub_body(item.encode("utf-8", "surrogatepass"))
                out[key] = inner
                changed = changed or inner != item
                continue
            out[key], moved = _clean(item)
            changed = changed or moved
        return out, changed
    if isinstance(value, list):
        items = [_clean(v) for v in value]
        return [v for v, _ in items], any(moved for _, moved in items)
    return value, False


def _dumps(value: Any) -> str:
    """JSON text of a walked value: numbers as they were written, strings escaped to ASCII (a lone
    surrogate stays an escape, so the text is always valid UTF-8)."""
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dumps(v) for v in value) + "]"
    return json.dumps(value)


def _withhold_context(text: str) -> str:
    """Text that is not JSON, cut at its first context field that may hold a credential."""
    for match in _CONTEXT_NAME.finditer(text):
        name = match.group(1)
        if name in SAFE_CONTEXT_FIELDS and _KEY_END.match(text, match.end()):
            continue
        rest = len(text) - match.start()
        return (text[:match.start()] + f"[{rest} characters withheld from the context field "
                f"{match.group(0)[:40]!r} on: a message that is not JSON may hold a credential there]")
    return text
