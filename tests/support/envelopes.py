"""The one check of an error answer: its status, and the envelope every error has
(``{"error": {"code", "message", "requestId"}}``, the request id also in ``X-Request-Id``)."""

from __future__ import annotations

import re

import httpx

ENVELOPE_KEYS = {"code", "message", "requestId"}


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, str]:
    """Assert ``response`` is an error of ``status`` and ``code`` in the service's envelope;
    the envelope's members (to check the message)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == ENVELOPE_KEYS, error
    assert error["code"] == code, error
    assert re.fullmatch(r"req_[0-9a-f]{24}", error["requestId"]), error
    assert response.headers["x-request-id"] == error["requestId"]
    return dict(error)
