"""The client's own httpx transport: part bodies over plain HTTP go out with ``sendfile``,
download bodies come in with ``readinto``.

Through httpx a part's bytes are copied from the page cache into Python and again into the
socket; most of a fast upload's client CPU went there. For a request whose body is a
``PartBody`` (tracestore/client/parts.py) and whose URL is ``http://``, this transport writes the
request line and headers itself on a kept-alive ``http.client`` connection, lets the body
send itself (read and hashed chunk by chunk, sent from the file by the kernel), and reads
the answer into an ``httpx.Response``. Likewise a download's GET (one carrying a
``transfers.BodySink``): its body is read from the socket into one reused buffer and handed
to the sink, which hashes and writes it; through httpx each chunk was a new bytes object and
the client's download reached a third of ``openssl dgst``'s speed. The API's calls over
``http://`` take the same connections, their answers read as httpx reads them. A request
over ``https`` (or with a body of unknown length) goes through httpx's own transport, built
at the first such request: building one loads the CA bundle and imports httpcore, 66-98 ms
of every command's start on this machine kind, which a command talking to a local service
over ``http://`` never needs. Every request goes through httpx's own transport when the
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
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from tracestore.client.parts import PartBody, SendFailed
from tracestore.client.transfers import BODY_SINK, BodySink

# Idle connections kept per host; more than the uploader's default concurrency.
MAX_IDLE = 16
# One download's receive buffer, reused for every read of its body.
RECEIVE_CHUNK = 1024 * 1024
# The most of an API answer's body read at a time.
ANSWER_CHUNK = 64 * 1024


class SendfileTransport(httpx.BaseTransport):
    """Plain-HTTP requests on kept-alive ``http.client`` connections of its own (part
    bodies by ``sendfile``, download bodies by ``readinto``); the others through an
    ``httpx.HTTPTransport`` made with ``kwargs`` at the first of them."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        # As httpx's pool does, an idle connection is not reused after keepalive_expiry: a
        # balancer or NAT in between may have dropped it without a word, or close it just
        # as the request goes out (a request that is not retried then fails).
        self._expiry = kwargs.get("limits", httpx.Limits()).keepalive_expiry
        self._lock = threading.Lock()
        # Per host, the idle connections and when each went idle (time.monotonic()).
        self._idle: dict[tuple[str, int], list[tuple[http.client.HTTPConnection, float]]] = {}
        self._httpx: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "http":
            sink = request.extensions.get(BODY_SINK)
            if isinstance(sink, BodySink) and request.method == "GET":
                return self._receive(request, sink)
            if isinstance(request.stream, PartBody):
                return self._send(request, request.stream)
            if isinstance(request.stream, httpx.ByteStream):
                return self._exchange(request)
        return self._httpx_transport().handle_request(request)

    def _httpx_transport(self) -> httpx.HTTPTransport:
        with self._lock:
            if self._httpx is None:
                self._httpx = httpx.HTTPTransport(**self._kwargs)
            return self._httpx

    def _exchange(self, request: httpx.Request) -> httpx.Response:
        """A request whose body httpx holds whole (an API call's JSON, or none); the answer
        is read as its caller reads it, and the connection kept once it has been."""
        connection, host, port = self._connection(request)
        try:
            try:
                _put_head(connection, request)
                body = request.read()
                if body:
                    connection.send(body)
            except OSError as exc:
                return _early_response(connection, request, exc)
            try:
                answer = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise _transport_error(exc, request) from exc
        except BaseException:
            connection.close()
            raise
        return httpx.Response(
            answer.status,
            headers=_headers(answer),
            stream=_AnswerBody(
                answer, request, lambda: self._release(host, port, connection, answer)
            ),
            request=request,
        )

    def _release(
        self,
        host: str,
        port: int,
        connection: http.client.HTTPConnection,
        answer: http.client.HTTPResponse,
    ) -> None:
        """Keep the connection for the next request once ``answer`` was read to its end and
        the server keeps it open; close it otherwise (the caller stopped early). The answer
        is closed too: when the server said it closes, the socket is the answer's alone."""
        if answer.isclosed() and not answer.will_close and not answer.length:
            self._checkin(host, port, connection)
        else:
            answer.close()
            connection.close()

    def _connection(self, request: httpx.Request) -> tuple[http.client.HTTPConnection, str, int]:
        host, port = request.url.host, request.url.port or 80
        timeouts = request.extensions.get("timeout", {})
        read, write = timeouts.get("read"), timeouts.get("write")
        timeout = None if read is None or write is None else max(read, write)
        return self._checkout(request, host, port, timeouts.get("connect"), timeout), host, port

    def _receive(self, request: httpx.Request, sink: BodySink) -> httpx.Response:
        """A GET whose 200/206 body goes from the socket into one reused buffer and on to
        ``sink`` (hashed and written there), never through httpx's per-chunk bytes."""
        connection, host, port = self._connection(request)
        content = b""
        try:
            try:
                _put_head(connection, request)
                answer = connection.getresponse()
                if answer.status in (200, 206):
                    sink.begin(answer.status)
                    view = memoryview(bytearray(RECEIVE_CHUNK))
                    while n := answer.readinto(view):
                        sink.write(view[:n])
                else:
                    content = answer.read()
            except (OSError, http.client.HTTPException) as exc:
                raise _transport_error(exc, request) from exc
        except BaseException:
            connection.close()
            raise
        self._release(host, port, connection, answer)
        return httpx.Response(
            answer.status,
            headers=_headers(answer),
            content=content,
            request=request,
            extensions={BODY_SINK: answer.status in (200, 206)},
        )

    def _send(self, request: httpx.Request, body: PartBody) -> httpx.Response:
        connection, host, port = self._connection(request)
        try:
            try:
                _put_head(connection, request)
            except OSError as exc:
                raise SendFailed(exc) from exc
            assert connection.sock is not None
            body.send_to(connection.sock)
        except SendFailed as failed:
            return _early_response(connection, request, failed.error)
        except BaseException:
            connection.close()
            raise
        try:
            answer = connection.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise _transport_error(exc, request) from exc
        self._release(host, port, connection, answer)
        return httpx.Response(
            answer.status, headers=_headers(answer), content=content, request=request
        )

    def _checkout(
        self,
        request: httpx.Request,
        host: str,
        port: int,
        connect_timeout: float | None,
        timeout: float | None,
    ) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.get((host, port), [])
            while idle:
                connection, since = idle.pop()
                fresh = self._expiry is None or time.monotonic() - since < self._expiry
                if fresh and _usable(connection):
                    assert connection.sock is not None
                    connection.sock.settimeout(timeout)
                    return connection
                connection.close()
        connection = http.client.HTTPConnection(host, port, timeout=connect_timeout)
        try:
            connection.connect()
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc), request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        assert connection.sock is not None
        connection.sock.settimeout(timeout)
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _checkin(self, host: str, port: int, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault((host, port), [])
            if len(idle) < MAX_IDLE:
                idle.append((connection, time.monotonic()))
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            connections = [c for idle in self._idle.values() for c, _ in idle]
            self._idle.clear()
        for connection in connections:
            connection.close()
        if self._httpx is not None:
            self._httpx.close()


class _AnswerBody(httpx.SyncByteStream):
    """An answer's body read from its connection as the caller asks for it; ``release``
    runs once, when the caller closes the response."""

    def __init__(
        self,
        answer: http.client.HTTPResponse,
        request: httpx.Request,
        release: Callable[[], None],
    ) -> None:
        self._answer = answer
        self._request = request
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> Iterator[bytes]:
        # read1: what has come, as httpx hands it on (read waits for ANSWER_CHUNK bytes, so
        # a slowly streamed answer's first line would wait for the end); read once more at
        # the end, which marks the answer closed (read1 leaves it open at its length).
        try:
            while chunk := self._answer.read1(ANSWER_CHUNK):
                yield chunk
            self._answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise _transport_error(exc, self._request) from exc
        if self._answer.length:
            # http.client ends a read short of Content-Length quietly; httpx does not.
            raise httpx.RemoteProtocolError(
                f"The connection closed {self._answer.length} bytes before the end of the answer",
                request=self._request,
            )

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


def default_transport(limits: httpx.Limits) -> httpx.BaseTransport | None:
    """The transport a ``Client`` gives the httpx client it makes: this one, unless the
    environment names a proxy (then httpx's own, which honours it for every request)."""
    if urllib.request.getproxies():
        return None
    return SendfileTransport(limits=limits)


def _put_head(connection: http.client.HTTPConnection, request: httpx.Request) -> None:
    """Write the request line and httpx's headers (Host and Content-Length among them)."""
    connection.putrequest(
        request.method,
        request.url.raw_path.decode("ascii"),
        skip_host=True,
        skip_accept_encoding=True,
    )
    for name, value in request.headers.raw:
        connection.putheader(name.decode("latin-1"), value.decode("latin-1"))
    connection.endheaders()


def _headers(answer: http.client.HTTPResponse) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.getheaders()]


# How long to wait for an answer the server may have sent before it stopped reading a body.
_EARLY_ANSWER_TIMEOUT = 5.0


def _early_response(
    connection: http.client.HTTPConnection, request: httpx.Request, error: OSError
) -> httpx.Response:
    """A send failed: a server may answer before it takes the whole body (an expired URL,
    a body too large) and close, and that answer, when there is one, is the news, not the
    broken pipe (httpx reads it too). The connection is closed either way."""
    sock = connection.sock
    try:
        if sock is None:
            raise _transport_error(error, request) from error
        timeout = sock.gettimeout()
        sock.settimeout(min(timeout, _EARLY_ANSWER_TIMEOUT) if timeout else _EARLY_ANSWER_TIMEOUT)
        try:
            answer = connection.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException):
            raise _transport_error(error, request) from error
    finally:
        connection.close()
    return httpx.Response(answer.status, headers=_headers(answer), content=content, request=request)


def _transport_error(error: BaseException, request: httpx.Request) -> httpx.TransportError:
    reason = str(error) or type(error).__name__
    if isinstance(error, TimeoutError):
        return httpx.TimeoutException(reason, request=request)
    if isinstance(error, ConnectionError | http.client.HTTPException):
        return httpx.RemoteProtocolError(reason, request=request)
    return httpx.NetworkError(reason, request=request)


def _usable(connection: http.client.HTTPConnection) -> bool:
    """An idle connection the server has not closed (a closed one polls as readable)."""
    sock = connection.sock
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        return not poller.poll(0)
    except OSError:
        return False
