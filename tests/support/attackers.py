"""Raw-socket attackers of a real ``tracestore serve``: sessions to attack, part bodies that
send only some of their bytes, and how long a good session's parts take meanwhile."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support.served import Served
from tests.support.uploading import UPLOAD_URL


def start_upload(served: Served, sizes: dict[str, int], **extra: Any) -> dict[str, Any]:
    """An upload of supporting files of ``sizes`` (``extra``: more members of the request);
    its upload-url answer."""
    with served.api() as api:
        response = api.post(
            UPLOAD_URL,
            json={
                "name": "attacked",
                "files": [{"name": n, "size": s, "role": "supporting"} for n, s in sizes.items()],
                **extra,
            },
        )
    assert response.status_code == 200, response.text
    return dict(response.json())


def open_body(url: str, length: int, sent: bytes = b"") -> socket.socket:
    """A PUT of ``url`` declaring ``length`` bytes, of which only ``sent`` go out."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
    head = (
        f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    sock.sendall(head.encode() + sent)
    return sock


def other_session_parts(served: Served, timeout: float = 10) -> float:
    """Seconds that 20 small parts of a new session take to go in, one after the other."""
    other = start_upload(served, {f"g{i}.bin": 100 for i in range(20)})
    started = time.monotonic()
    with httpx.Client(timeout=timeout) as plain:
        for entry in other["files"]:
            response = plain.put(entry["parts"][0]["url"], content=b"g" * 100)
            assert response.status_code == 200, response.text
    return time.monotonic() - started


def server_log(data_dir: Path) -> str:
    return (data_dir.parent / "server.log").read_text(errors="replace")
