"""Reading AMQP frames off the broker's socket for less CPU than py-amqp's own loop.

py-amqp reads a frame with three ``recv`` calls, each asking for exactly the bytes it needs (the
7-byte header, the payload, the end octet): nine system calls a notification, and its
``drain_events`` sets the socket's timeout, and sets it back, around every frame. Profiled in
``tally bench collect`` that was about a quarter of the collector's CPU per notification.

Here the socket is read in chunks of up to ``READ_CHUNK`` bytes kept in the transport's own read
buffer (so py-amqp's recovery of a frame cut by a timeout still works: it puts the frame's bytes
back in front of that buffer), and ``read_frames`` reads every frame already in the buffer under one
timeout before handing them, in order, to py-amqp's frame handler. What is read, and in which order
it is dispatched, is py-amqp's; only the system calls are fewer.
"""

from __future__ import annotations

import errno
from typing import Any

import kombu
from amqp.transport import TCPTransport

#: Bytes asked of the socket at a time: a few dozen notifications.
READ_CHUNK = 1 << 16
#: Frames read under one timeout at most before they are dispatched (bounds the frames held).
MAX_FRAMES = 512


class BufferedTCPTransport(TCPTransport):  # type: ignore[misc]  # py-amqp is untyped
    """py-amqp's TCP transport, reading the socket in chunks (the surplus waits in ``_read_buffer``)."""

    __slots__ = ()  # the same layout as TCPTransport, so a connected transport can take this class

    def _read(self, n: int, initial: bool = False, _errnos: tuple[int, ...] = (errno.EAGAIN, errno.EINTR)) -> bytes:
        this: Any = self  # py-amqp's attributes, untyped
        buf = this._read_buffer
        if type(buf) is not bytearray:  # py-amqp sets bytes back after a timeout cut a frame
            buf = this._read_buffer = bytearray(buf)
        recv = this._quick_recv
        while len(buf) < n:
            try:
                chunk = recv(max(READ_CHUNK, n - len(buf)))
            except OSError as exc:
                if exc.errno in _errnos:
                    if initial and this.raise_on_initial_eintr:
                        raise TimeoutError() from None  # socket.timeout, as py-amqp raises it
                    continue
                raise
            if not chunk:
                raise OSError("Server unexpectedly closed connection")
            buf += chunk  # kept in the transport even when a later recv fails: nothing read is lost
        result = bytes(buf[:n])
        del buf[:n]  # from the front of a bytearray: no copy of what stays
        return result


def buffer_reads(conn: kombu.Connection) -> bool:
    """Make a connected kombu connection's py-amqp transport read in chunks; False when it is not plain
    TCP (TLS reads through its own ``_read``, left as it is)."""
    transport = conn.connection.transport
    if type(transport) is TCPTransport:
        transport.__class__ = BufferedTCPTransport
    return isinstance(transport, BufferedTCPTransport)


def read_frames(conn: kombu.Connection, timeout: float) -> int:
    """Read one frame (waiting up to ``timeout`` seconds: ``TimeoutError`` when none comes) and every
    further frame already buffered, then dispatch them in order; returns how many were read.

    Frames read before a failure are dispatched all the same, before the failure is raised."""
    connection: Any = conn.connection
    transport = connection.transport
    frames: list[Any] = []
    try:
        with transport.having_timeout(timeout):
            frames.append(transport.read_frame())
            while transport._read_buffer and len(frames) < MAX_FRAMES:
                frames.append(transport.read_frame())
    finally:
        handle = connection.on_inbound_frame
        for frame in frames:
            handle(frame)
    return len(frames)
