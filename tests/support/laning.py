"""Test helpers that hold the hot requests' lanes (``tracestore.server.serving.lanes``) to their
routes: an answer made comparable, a request driven over raw ASGI, a presigned URL's path,
and which requests a lane took. The app with its lanes and without them is conftest's
``both``."""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest

from tracestore.server.serving import lanes


def comparable(
    answer: httpx.Response, *, etag: bool = False
) -> tuple[int, list[tuple[str, str]], str]:
    """The answer but its request id (and with ``etag``, its ETag)."""
    request_id = answer.headers.get("x-request-id", "")
    body = answer.text.replace(request_id, "req_X") if request_id else answer.text
    hidden = {"x-request-id"} | ({"etag"} if etag else set())
    headers = [
        (key, "X" if key in hidden else value) for key, value in answer.headers.multi_items()
    ]
    return answer.status_code, headers, re.sub(r"req_[0-9a-f]{24}", "req_X", body)


def presigned_path(url: str) -> str:
    """A presigned URL's path and query, as a test client requests it."""
    return httpx.URL(url).raw_path.decode()


def taken_by(monkeypatch: pytest.MonkeyPatch, name: str) -> list[MutableMapping[str, Any]]:
    """The scopes of the requests the lane ``lanes.<name>`` (called with the services and
    the scope first) answers from now on, in order."""
    taken: list[MutableMapping[str, Any]] = []
    through = getattr(lanes, name)

    async def counted(services: Any, scope: MutableMapping[str, Any], *args: Any) -> Any:
        taken.append(scope)
        return await through(services, scope, *args)

    monkeypatch.setattr(lanes, name, counted)
    return taken


async def gone_mid_body(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes]:
    """Drive ``app`` over ASGI with a request whose client sends the body's first chunk and
    goes away; the answer's status and body (its request id masked)."""
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"name": ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    return await drive(app, method, path, headers, messages)


async def drive(
    app: Any,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    messages: list[dict[str, Any]],
) -> tuple[int, bytes]:
    """Drive ``app`` over ASGI with one request whose client sends ``messages``; the
    answer's status and body (its request id masked). Any ASGI server may hand an app
    headers uvicorn's parser would refuse."""
    sent: list[Any] = []

    async def receive() -> Any:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"test"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], re.sub(rb"req_[0-9a-f]{24}", b"req_X", body)
