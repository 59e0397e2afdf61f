"""The collector's chunked AMQP reads: the same frames as py-amqp's, whatever way the bytes arrive."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from tally_pipeline.collector.amqp_reading import READ_CHUNK, BufferedTCPTransport


def _frame(payload: bytes, channel: int = 1, kind: int = 3) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


@pytest.fixture
def pair() -> Iterator[tuple[BufferedTCPTransport, socket.socket]]:
    ours, broker = socket.socketpair()
    transport = BufferedTCPTransport("127.0.0.1:5672")
    transport.sock = ours
    transport._setup_transport()
    transport.sock.settimeout(0.2)
    yield transport, broker
    ours.close()
    broker.close()


def test_frames_sent_together_are_read_in_order_from_one_recv(pair) -> None:
    transport, broker = pair
    payloads = [b"a" * 10, b"b" * 3000, b"", b"c" * 7]
    broker.sendall(b"".join(_frame(p, channel=i) for i, p in enumerate(payloads)))
    assert [transport.read_frame() for _ in payloads] == [(3, i, p) for i, p in enumerate(payloads)]
    assert not transport._read_buffer


def test_a_frame_larger_than_a_chunk_is_read_whole(pair) -> None:
    transport, broker = pair
    payload = bytes(range(256)) * (3 * READ_CHUNK // 256)
    # More than the socket holds: sent from a thread while it is read.
    sender = threading.Thread(target=broker.sendall, args=(_frame(payload) + _frame(b"next"),))
    sender.start()
    try:
        assert transport.read_frame() == (3, 1, payload)
        assert transport.read_frame() == (3, 1, b"next")
    finally:
        sender.join()


def test_a_frame_cut_by_a_timeout_is_read_whole_once_the_rest_comes(pair) -> None:
    transport, broker = pair
    frame = _frame(b"x" * 500)
    broker.sendall(frame[:200])
    with pytest.raises(TimeoutError):
        transport.read_frame()
    broker.sendall(frame[200:] + _frame(b"y"))
    assert transport.read_frame() == (3, 1, b"x" * 500)
    assert transport.read_frame() == (3, 1, b"y")


def test_a_closed_connection_is_an_error(pair) -> None:
    transport, broker = pair
    broker.sendall(_frame(b"z")[:4])
    broker.close()
    with pytest.raises(OSError, match="closed"):
        transport.read_frame()
