"""An oslo.messaging transport URL (``rabbit://user:pass@host:port[,user:pass@host2:port]/vhost``) as
kombu connection URLs.

The URL is read as oslo.messaging's ``TransportURL.parse`` reads it (a test holds the two equal over
many URLs); the collector does not import oslo.messaging itself, whose import loads an eventlet
backend (seconds of start-up, and deprecation warnings in the log). Passwords are handed to the
redactor before anything can print them.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlparse

from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.redaction import remember_secret


class TransportURLError(ConfigurationError, ValueError):
    """A transport URL the collector cannot use."""


@dataclass(frozen=True)
class TransportHost:
    hostname: str | None
    port: int | None
    username: str | None
    password: str | None


@dataclass(frozen=True)
class TransportURL:
    transport: str
    virtual_host: str | None
    hosts: tuple[TransportHost, ...]
    query: dict[str, str]


@dataclass(frozen=True)
class Broker:
    """kombu URLs, one per broker host, in the order to try them, and a name for logs (no credentials)."""

    urls: tuple[str, ...]
    display: str


def parse_transport_url(url: str) -> TransportURL:
    """Split a transport URL into its parts, as oslo.messaging does."""
    parts = urlparse(url)
    if not parts.scheme:
        raise TransportURLError("no scheme (rabbit://…)")
    query = {key: ",".join(values) for key, values in parse_qs(parts.query).items()} if parts.query else {}
    vhost = unquote(parts.path[1:]) if parts.path.startswith("/") else None
    hosts = []
    for text in parts.netloc.split(","):
        if not text:
            continue
        username = password = None
        if "@" in text:
            username, text = text.rsplit("@", 1)
            if ":" in username:
                username, password = username.split(":", 1)
                password = unquote(password)
            username = unquote(username)
        hostname, port = _host_port(text)
        hosts.append(TransportHost(hostname, port, username, password))
    return TransportURL(parts.scheme, vhost, tuple(hosts), query)


def _host_port(text: str) -> tuple[str | None, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; a bare v6 address has no port (oslo.utils' rule)."""
    port = ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host = text
    if port and not port.isdigit():
        raise TransportURLError(f"port {port!r} is not a number")
    return host or None, int(port) if port else None


def broker_of(transport_url: str, *, password: str | None = None) -> Broker:
    """The broker a transport URL names. ``password`` fills in hosts whose URL gives a user and no password
    (so the password can live in the environment rather than in a file)."""
    parsed = parse_transport_url(transport_url)
    if parsed.transport != "rabbit":
        raise TransportURLError(f"the collector reads RabbitMQ: the URL's transport must be rabbit://, "
                                f"not {parsed.transport}://")
    vhost = parsed.virtual_host or ""
    # No host at all: oslo.messaging's default, guest on localhost.
    hosts = parsed.hosts or (TransportHost("localhost", None, "guest", "guest"),)
    urls, shown = [], []
    for host in hosts:
        hostname = host.hostname or "localhost"
        port = host.port or 5672
        user = host.username or ""
        secret = host.password or ""
        if not secret and user and password:
            secret = password
        remember_secret(secret)
        where = f"[{hostname}]" if ":" in hostname else hostname
        urls.append(f"amqp://{quote(user, safe='')}:{quote(secret, safe='')}@{where}:{port}/{quote(vhost, safe='')}")
        shown.append(f"{user + '@' if user else ''}{where}:{port}")
    return Broker(tuple(urls), f"rabbit://{','.join(shown)}/{vhost}")
