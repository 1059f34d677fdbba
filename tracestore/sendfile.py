"""The client's own httpx transport: part bodies over plain HTTP go out with ``sendfile``.

Through httpx a part's bytes are copied from the page cache into Python and again into the
socket; most of a fast upload's client CPU went there. For a request whose body is a
``PartBody`` (tracestore/parts.py) and whose URL is ``http://``, this transport writes the
request line and headers itself on a kept-alive ``http.client`` connection, lets the body
send itself (read and hashed chunk by chunk, sent from the file by the kernel), and reads
the answer into an ``httpx.Response``. Every other request (the API, downloads, ``https``
part URLs) goes through httpx's own transport unchanged; so does every request when the
caller hands the ``Client`` an ``httpx.Client`` of its own.

Network failures surface as the httpx errors the retry logic already knows (connect, read,
write, timeout, remote protocol); a ``Stopped`` or ``IntegrityError`` raised while the body
is sent closes the connection and propagates as it is.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from typing import Any

import httpx

from tracestore.parts import PartBody

# Idle connections kept per host; more than the uploader's default concurrency.
MAX_IDLE = 16


class SendfileTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` that sends ``PartBody`` requests over ``http://`` itself."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, PartBody) or request.url.scheme != "http":
            return super().handle_request(request)
        host, port = request.url.host, request.url.port or 80
        timeouts = request.extensions.get("timeout", {})
        timeout = max((t for t in timeouts.values() if t is not None), default=None)
        connection = self._checkout(host, port, timeout)
        try:
            connection.putrequest(
                request.method,
                request.url.raw_path.decode("ascii"),
                skip_host=True,
                skip_accept_encoding=True,
            )
            for name, value in request.headers.raw:
                connection.putheader(name.decode("latin-1"), value.decode("latin-1"))
            connection.endheaders()
            assert connection.sock is not None
            request.stream.send_to(connection.sock)
            answer = connection.getresponse()
            content = answer.read()
        except TimeoutError as exc:
            connection.close()
            raise httpx.TimeoutException(f"timed out: {exc}", request=request) from exc
        except (http.client.HTTPException, ConnectionError) as exc:
            connection.close()
            raise httpx.RemoteProtocolError(
                str(exc) or type(exc).__name__, request=request
            ) from exc
        except OSError as exc:
            connection.close()
            raise httpx.NetworkError(str(exc), request=request) from exc
        except BaseException:
            connection.close()
            raise
        if answer.will_close:
            connection.close()
        else:
            self._checkin(host, port, connection)
        return httpx.Response(
            answer.status,
            headers=[
                (name.encode("latin-1"), value.encode("latin-1"))
                for name, value in answer.getheaders()
            ],
            content=content,
            request=request,
        )

    def _checkout(self, host: str, port: int, timeout: float | None) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.get((host, port), [])
            while idle:
                connection = idle.pop()
                if _usable(connection):
                    connection.timeout = timeout
                    assert connection.sock is not None
                    connection.sock.settimeout(timeout)
                    return connection
                connection.close()
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            connection.connect()
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _checkin(self, host: str, port: int, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault((host, port), [])
            if len(idle) < MAX_IDLE:
                idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            connections = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for connection in connections:
            connection.close()
        super().close()


def _usable(connection: http.client.HTTPConnection) -> bool:
    """An idle connection the server has not closed (a closed one reads as readable)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
