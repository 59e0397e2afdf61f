"""Serving an ASGI app over a real loopback socket inside the test process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port; yield its base URL; stop it on exit.

    The socket is bound and listening before uvicorn starts, so a client may connect at once: the
    kernel queues the connection until uvicorn accepts it (no polling for readiness).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
