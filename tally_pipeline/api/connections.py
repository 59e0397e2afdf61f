"""The HTTP/1.1 connection layer under the API: uvicorn's httptools protocol with the limits it lacks.

uvicorn's httptools protocol reads a request line and headers of any size (a 64 MiB header is
buffered whole before the parser says anything), and waits for them, and for a body short of its
``Content-Length``, for ever: its only timer is the keep-alive one between requests, cancelled by
the first byte of the next one. (Its h11 protocol caps headers but is slower and has no timer either.)
This subclass adds, per connection:

- a cap on the header section (request line and headers) checked while the bytes arrive: beyond it
  the request is answered ``431`` (``414`` for the request line alone) and the connection closed;
- a header deadline, from the connection's start (or the end of the previous exchange) to the end
  of the headers: an idle connection or one trickling its headers is closed;
- a body deadline, from the end of the headers to the end of the declared body: a body short of its
  ``Content-Length`` (or trickled) is closed, and the application sees the client disconnect. This
  also bounds how long an overstated ``Content-Length`` can swallow the client's next request;
- a cap on the connections one client address holds open at once (below uvicorn's global
  ``limit_concurrency``): a connection beyond it is answered ``503 too_many_connections`` and
  closed, so one address cannot take every slot.

uvicorn builds the protocol itself, one per connection, from its own ``Config``; the limits are set
on the class once per process (``configure``) by ``tally serve`` and by each of its worker processes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
import orjson
from prometheus_client import Counter
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("tally.api.connections")


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int = 64 * 1024
    max_request_line_bytes: int = 8 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections_per_client: int | None = None  # None: no cap per address


class _Refused(Exception):
    def __init__(self, status: int, code: str, limit: int):
        super().__init__(code)
        self.status, self.code, self.limit = status, code, limit


#: Connections this server closed for a limit, by reason (on ``/metrics`` through the app's registry).
CONNECTIONS_CLOSED = Counter("tally_connections_closed", "Connections this server closed for a limit: header or "
                             "body deadline, oversized headers or request line, too many from one address.",
                             ["reason"], registry=None)


def _count(reason: str) -> None:
    CONNECTIONS_CLOSED.labels(reason=reason).inc()


class BoundedHttpProtocol(HttpToolsProtocol):
    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    #: Open connections per client address in this process (one event loop: no lock needed).
    open_by_address: ClassVar[dict[str, int]] = {}

    @classmethod
    def configure(cls, limits: ConnectionLimits) -> None:
        cls.limits = limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counting_headers = True  # bytes now arriving belong to a header section
        self._header_bytes = 0
        self._reading_body = False
        self._refused = False
        self._deadline: Any = None  # asyncio.TimerHandle
        self._address: str | None = None  # counted in open_by_address while open

    # -- deadlines ------------------------------------------------------------------------------

    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire, reason, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, reason: str, seconds: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        _count(reason)
        what = "headers" if reason == "header_timeout" else "declared body"
        log.info("closed connection from %s: %s not received within %g s", self._peer(), what, seconds)
        self.transport.close()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown peer"

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        cap = self.limits.max_connections_per_client
        if cap is not None and self.client:
            address = self.client[0]
            held = self.open_by_address.get(address, 0)
            if held >= cap:
                self._refuse_connection(address, cap)
                return
            self.open_by_address[address] = held + 1
            self._address = address
        self._arm(self.limits.header_timeout, "header_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            left = self.open_by_address.get(self._address, 1) - 1
            if left > 0:
                self.open_by_address[self._address] = left
            else:
                self.open_by_address.pop(self._address, None)
            self._address = None
        super().connection_lost(exc)

    def _refuse_connection(self, address: str, cap: int) -> None:
        """Answer a connection over its address's cap at once, with a body a client can read, and close."""
        self._refused = True
        _count("too_many_connections")
        log.info("refused a connection from %s: it holds %d already (api.max_connections_per_client)", address, cap)
        body = orjson.dumps({"error": "too_many_connections", "detail": f"this address holds {cap} connections "
                             "already (api.max_connections_per_client)", "max": cap})
        self.transport.write(b"".join([
            STATUS_LINE[503], b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(),
            b"\r\nretry-after: 1\r\nconnection: close\r\n\r\n", body]))
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        view = memoryview(data)
        while view and not self._refused:
            if self._counting_headers:
                room = self.limits.max_header_bytes - self._header_bytes
                if room <= 0:  # a full header section's worth fed, and the headers still not over
                    self._refuse(_Refused(431, "headers_too_large", self.limits.max_header_bytes))
                    return
                piece, view = view[:room], view[room:]
                self._header_bytes += len(piece)
            else:
                piece, view = view, memoryview(b"")
            if not self._feed(piece):
                return
            if self._counting_headers and len(getattr(self, "url", b"")) > self.limits.max_request_line_bytes:
                self._refuse(_Refused(414, "request_line_too_long", self.limits.max_request_line_bytes))
                return

    def _feed(self, piece: memoryview) -> bool:
        """Feed the parser as uvicorn does; False once the connection is answered or handed over."""
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        except httptools.HttpParserError as exc:
            refusal = exc.__context__ if isinstance(exc.__context__, _Refused) else exc
            if isinstance(refusal, _Refused):
                self._refuse(refusal)
            else:
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
            return False
        return True

    def _refuse(self, refusal: _Refused) -> None:
        self._refused = True
        self._disarm()
        _count(refusal.code)
        log.info("refused a request from %s: %s (limit %d bytes)", self._peer(), refusal.code, refusal.limit)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # an earlier request's answer is still being written: no room for ours
            return
        body = orjson.dumps({"error": refusal.code, "max_bytes": refusal.limit})
        head = [STATUS_LINE[refusal.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(),
                 b"\r\nconnection: close\r\n\r\n", body]
        self.transport.write(b"".join(head))
        self.transport.close()

    # -- parser callbacks -----------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        if len(self.url) > self.limits.max_request_line_bytes:
            raise _Refused(414, "request_line_too_long", self.limits.max_request_line_bytes)
        self._counting_headers = False
        self._reading_body = True
        self._arm(self.limits.body_timeout, "body_timeout")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_body = False
        self._counting_headers = True
        self._header_bytes = 0
        if self.cycle is not None and self.cycle.response_complete:
            self._arm(self.limits.header_timeout, "header_timeout")  # answered early: await the next request
        else:
            self._disarm()  # the application has the request: its time is not ours to limit
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self._reading_body and not self.transport.is_closing():
            self._arm(self.limits.header_timeout, "header_timeout")
