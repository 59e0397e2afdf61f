"""An API wired as ``tally serve`` wires it, with tokens of every scope, for the contract and security tests."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from starlette.applications import Starlette

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import Principal, TokenBook, digest
from tally_pipeline.config import TallyConfig
from tally_pipeline.runtime import Runtime
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import Store

SIM_CLOUD = "sim"

# One token per scope set the security matrix walks; secrets are long enough for the tokens file rule.
TOKENS: dict[str, frozenset[str]] = {
    "all-scopes-token-000000": frozenset({"read", "admin", "ingest:*"}),
    "read-token-000000000000": frozenset({"read"}),
    "admin-token-00000000000": frozenset({"admin"}),
    "ingest-any-token-000000": frozenset({"ingest:*"}),
    "ingest-c1-token-0000000": frozenset({"ingest:c1"}),
    "ingest-other-token-0000": frozenset({"ingest:other"}),
}
ALL = "all-scopes-token-000000"


def token_for(*scopes: str) -> str:
    wanted = frozenset(scopes)
    return next(token for token, granted in TOKENS.items() if granted == wanted)


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def token_book() -> TokenBook:
    return TokenBook([(digest(token), Principal(token.split("-token")[0], scopes)) for token, scopes in TOKENS.items()])


def runtime_for(store: Store) -> Runtime:
    """A runtime whose configuration has one small simulated cloud, so ``POST /internal/sync/sim`` runs."""
    config = TallyConfig.model_validate(
        {"database": store.url, "clouds": {SIM_CLOUD: {"provider": "simulated", "resources": 3, "hours": 2}}}
    )
    return Runtime(config, _store=store)


@dataclass
class Api:
    app: Starlette
    ctx: ApiContext


def build_api(store: Store, *, max_body_bytes: int = 64 * 1024, anonymous: bool = False) -> Api:
    """The app on ``store``; ``anonymous``: no tokens file (every caller trusted, as on loopback)."""
    runtime = runtime_for(store)
    ctx = ApiContext(
        store=store,
        ingestor=Ingestor(store, default_registry()),
        tokens=None if anonymous else token_book(),
        max_body_bytes=max_body_bytes,
        runtime=runtime,
    )
    return Api(create_app(ctx), ctx)


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released: connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
