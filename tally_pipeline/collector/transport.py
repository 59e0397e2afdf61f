"""An oslo.messaging transport URL (``rabbit://user:pass@host:port[,user:pass@host2:port]/vhost``) as
kombu connection URLs, read by oslo.messaging's own parser so it means what it means to the services.

Passwords are handed to the redactor before anything can print them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from urllib.parse import quote

from tally_pipeline.redaction import remember_secret


class TransportURLError(ValueError):
    """A transport URL the collector cannot use."""


@dataclass(frozen=True)
class Broker:
    """kombu URLs, one per broker host, in the order to try them, and a name for logs (no credentials)."""

    urls: tuple[str, ...]
    display: str


def broker_of(transport_url: str, *, password: str | None = None) -> Broker:
    """The broker a transport URL names. ``password`` fills in hosts whose URL gives a user and no password
    (so the password can live in the environment rather than in a file)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oslo.messaging's imports announce eventlet's deprecation
        import oslo_messaging
        from oslo_config import cfg
    try:
        parsed = oslo_messaging.TransportURL.parse(cfg.ConfigOpts(), transport_url)
    except Exception as exc:  # oslo raises InvalidTransportURL and plain ValueErrors
        raise TransportURLError(f"not a transport URL ({type(exc).__name__})") from None
    if parsed.transport != "rabbit":
        raise TransportURLError(f"the collector reads RabbitMQ: the URL's transport must be rabbit://, "
                                f"not {parsed.transport}://")
    vhost = parsed.virtual_host or ""
    hosts = parsed.hosts or [None]  # no host at all: oslo.messaging's default, guest on localhost
    urls, shown = [], []
    for host in hosts:
        hostname = (host.hostname if host else None) or "localhost"
        port = (host.port if host else None) or 5672
        user = host.username if host else "guest"
        secret = host.password if host else "guest"
        if not secret and user and password:
            secret = password
        remember_secret(secret or "")
        where = f"[{hostname}]" if ":" in hostname else hostname
        urls.append(f"amqp://{quote(user or '', safe='')}:{quote(secret or '', safe='')}@{where}:{port}/"
                    f"{quote(vhost, safe='')}")
        shown.append(f"{user + '@' if user else ''}{where}:{port}")
    return Broker(tuple(urls), f"rabbit://{','.join(shown)}/{vhost}")
