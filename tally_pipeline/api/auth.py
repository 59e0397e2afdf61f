"""Bearer tokens with scopes, read from a YAML tokens file.

``tokens: [{token: SECRET, scopes: [...]}, {token_sha256: HEX, scopes: [...]}]``. Secrets are held
only as SHA-256 digests and every presented token is compared with every known digest in
constant time, so neither timing nor an early exit tells which token nearly matched.

Scopes: ``ingest:<cloud>`` / ``ingest:*`` (write events for a cloud), ``read`` (queries, the dead
letter, usage), ``read:<cloud>`` (one cloud's usage, and nothing else: a tenant's dashboard or a
billing system of that cloud), ``admin`` (internal calls such as a sync). Scopes are independent:
admin does not imply read.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.redaction import yaml_error_text

SCOPE_PATTERN = re.compile(r"^(read|read:[A-Za-z0-9_.-]{1,63}|admin|ingest:\*|ingest:[A-Za-z0-9_.-]{1,63})$")
#: Words of example tokens (the shipped examples are ``change-me-…``): a token holding one is refused.
_PLACEHOLDER = re.compile(r"change[-_ .]?me|replace[-_ .]?me|placeholder|example|your[-_ .]?token|<|>|\.\.\.|…",
                          re.IGNORECASE)
#: The example tokens docs and deploy/ ship, refused by digest too (a ``token_sha256`` of one).
PLACEHOLDER_TOKENS = ("change-me-collector", "change-me-reader", "change-me-admin", "change-me")
MIN_TOKEN_CHARS = 16
MIN_DISTINCT_CHARS = 10
HOW_TO_MAKE = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_weakness(token: str) -> str | None:
    """Which rule ``token`` breaks (None: it may be used). The token itself is never part of the answer."""
    if _PLACEHOLDER.search(token):
        return f"it is an example placeholder, not a secret ({HOW_TO_MAKE})"
    if len(token) < MIN_TOKEN_CHARS:
        return f"too weak: {len(token)} characters, at least {MIN_TOKEN_CHARS} ({HOW_TO_MAKE})"
    if len(set(token)) < MIN_DISTINCT_CHARS:
        return (f"too weak: {len(set(token))} distinct characters, at least {MIN_DISTINCT_CHARS} "
                f"({HOW_TO_MAKE})")
    return None


class TokensFileError(ConfigurationError, ValueError):
    pass


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    token: str | None = None
    token_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    scopes: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_secret(self) -> _TokenEntry:
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError("give exactly one of token or token_sha256")
        if self.token is not None and (weakness := token_weakness(self.token)) is not None:
            raise ValueError(f"token refused: {weakness}")
        if self.token_sha256 is not None and self.token_sha256.lower() in _PLACEHOLDER_DIGESTS:
            raise ValueError(f"token_sha256 refused: it is the digest of an example placeholder ({HOW_TO_MAKE})")
        for scope in self.scopes:
            if not SCOPE_PATTERN.match(scope):
                raise ValueError(f"unknown scope {scope!r} (read, read:<cloud>, admin, ingest:*, ingest:<cloud>)")
        return self


_PLACEHOLDER_DIGESTS = frozenset(hashlib.sha256(t.encode()).hexdigest() for t in PLACEHOLDER_TOKENS)


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[_TokenEntry]


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do."""

    name: str
    scopes: frozenset[str]

    def has(self, scope: str) -> bool:
        return scope in self.scopes

    def may_ingest(self, cloud: str) -> bool:
        return "ingest:*" in self.scopes or f"ingest:{cloud}" in self.scopes

    def readable_clouds(self) -> frozenset[str] | None:
        """The clouds whose usage this caller may read: None for every cloud (``read``), else those
        its ``read:<cloud>`` scopes name (empty: none)."""
        if "read" in self.scopes:
            return None
        return frozenset(s.removeprefix("read:") for s in self.scopes if s.startswith("read:"))

    def may_ingest_any(self) -> bool:
        return any(s.startswith("ingest:") for s in self.scopes)

    def named_clouds(self) -> frozenset[str]:
        """The clouds an ``ingest:<cloud>`` scope names (``ingest:*`` names none: it is not a bounded set)."""
        return frozenset(s.removeprefix("ingest:") for s in self.scopes if s.startswith("ingest:") and s != "ingest:*")


ANONYMOUS_LOCAL = Principal("anonymous (loopback, no tokens file)", frozenset({"read", "admin", "ingest:*"}))


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenBook:
    """The known tokens. ``None`` as a book means "no tokens file": anonymous local use."""

    def __init__(self, entries: list[tuple[bytes, Principal]]):
        self._entries = entries

    @classmethod
    def load(cls, path: str | Path) -> TokenBook:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise TokensFileError(f"cannot read tokens file {str(path)!r}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise TokensFileError(f"{path}: not valid YAML: {yaml_error_text(exc)}") from None
        try:
            parsed = _TokensFile.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise TokensFileError(f"{path}: {where}: {message}") from None
        entries = []
        for i, entry in enumerate(parsed.tokens):
            secret = digest(entry.token) if entry.token is not None else bytes.fromhex(entry.token_sha256 or "")
            entries.append((secret, Principal(entry.name or f"token #{i + 1}", frozenset(entry.scopes))))
        return cls(entries)

    def authenticate(self, presented: str) -> Principal | None:
        candidate = digest(presented)
        found: Principal | None = None
        for secret, principal in self._entries:  # no early exit: the same work for every token
            if hmac.compare_digest(candidate, secret):
                found = principal
        return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
