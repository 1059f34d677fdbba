"""Small real HTTP servers in a thread, for as long as a ``with`` block runs: a
``BaseHTTPRequestHandler`` for the client's transport tests, and an ASGI app on a real uvicorn
running the body protocol."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import uvicorn

from tests.support.ports import free_port
from tests.support.waiting import wait_until
from tracestore.server.serving.body_protocol import BodyProtocol


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served until the block ends; its base URL (``http://127.0.0.1:PORT``)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def uvicorn_serving(app: Any, **config: Any) -> Iterator[int]:
    """``app`` on a real uvicorn running ``BodyProtocol``, in a thread, on a free port (the
    port yielded); ``config`` adds to or overrides uvicorn's options."""
    port = free_port()
    options = {"http": BodyProtocol, "lifespan": "off", "log_level": "warning", **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "uvicorn did not start", timeout=10, every=0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
