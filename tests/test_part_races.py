"""Hostile and unlucky clients against the part PUT's one-hop path (concurrent sends of
one part, a stalled first send, re-sends on one connection, refused bodies), through a real
`tracestore serve`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.attackers import start_upload
from tests.support.served import Served, serving
from tests.support.uploading import COMPLETE_URL, UPLOAD_URL, checksum_b64
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attack") / "data"


@pytest.fixture(scope="module")
def served(data_dir: Path) -> Iterator[Served]:
    with serving(data_dir) as server:
        yield server


def head(url: str, length: int, *extra: str) -> bytes:
    p = urlsplit(url)
    lines = [f"PUT {p.path}?{p.query} HTTP/1.1", f"Host: {p.netloc}", f"Content-Length: {length}"]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


def connect(url: str) -> socket.socket:
    p = urlsplit(url)
    return socket.create_connection((p.hostname or "", p.port or 80), timeout=30)


def read_response(sock: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(bytes(buf))
        buf += chunk
    raw, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(rest)
        rest += chunk
    buf[:] = rest[length:]
    return status, headers, rest[:length]


def complete(
    served: Served, upload_id: str, parts: dict[str, list[tuple[int, str]]]
) -> httpx.Response:
    with served.api() as http:
        return http.post(
            COMPLETE_URL,
            json={
                "uploadId": upload_id,
                "files": [
                    {"name": n, "parts": [{"partNumber": k, "etag": e} for k, e in ps]}
                    for n, ps in parts.items()
                ],
            },
        )


def sha_of(done: httpx.Response) -> str:
    return str(done.json()["files"][0]["hash"]).removeprefix("sha256:")


def stored_bytes(data_dir: Path, sha256: str) -> bytes:
    return (data_dir / "blobs" / "blobs" / sha256[:2] / sha256[2:4] / sha256).read_bytes()


def assert_error(response: httpx.Response | tuple[int, dict[str, str], bytes], status: int) -> None:
    if isinstance(response, httpx.Response):
        code, body = response.status_code, response.content
    else:
        code, body = response[0], response[2]
    assert code == status, body
    assert "error" in json.loads(body), body


def test_checksum_mismatch_then_good_resend_on_one_connection(
    served: Served, data_dir: Path
) -> None:
    data = os.urandom(3000)
    answer = start_upload(served, {"a.bin": len(data)})
    url = answer["files"][0]["parts"][0]["url"]
    sock, buf = connect(url), bytearray()
    bad = head(url, len(data), f"x-amz-checksum-sha256: {checksum_b64(b'other')}") + data
    sock.sendall(bad)
    assert_error(read_response(sock, buf), 400)
    sock.sendall(head(url, len(data), f"x-amz-checksum-sha256: {checksum_b64(data)}") + data)
    status, headers, _ = read_response(sock, buf)
    assert status == 200
    etag = headers["etag"]
    # and a third request on the same connection still works
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(sock, buf)[0] == 200
    sock.close()
    done = complete(served, answer["uploadId"], {"a.bin": [(1, etag)]})
    assert done.status_code == 201, done.text
    sha = sha_of(done)
    assert sha == hashlib.sha256(data).hexdigest()
    assert stored_bytes(data_dir, sha) == data


def test_mismatch_on_a_body_that_is_still_arriving_keeps_the_connection(served: Served) -> None:
    data = os.urandom(3 * 1024 * 1024)
    answer = start_upload(served, {"a.bin": len(data)})
    url = answer["files"][0]["parts"][0]["url"]
    sock, buf = connect(url), bytearray()
    sock.sendall(head(url, len(data), f"x-amz-checksum-sha256: {checksum_b64(b'x')}"))
    time.sleep(0.3)
    for i in range(0, len(data), 100_000):
        sock.sendall(data[i : i + 100_000])
    assert_error(read_response(sock, buf), 400)
    sock.sendall(head(url, len(data)) + data)
    assert read_response(sock, buf)[0] == 200
    sock.close()


def test_pipelined_after_a_part_body(served: Served) -> None:
    answer = start_upload(served, {"a.bin": 10, "b.bin": 2_000_000})
    a, b = (f["parts"][0]["url"] for f in answer["files"])
    sock, buf = connect(a), bytearray()
    get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.sendall(head(a, 10) + b"a" * 10 + get + head(b, 2_000_000) + b"b" * 2_000_000 + get)
    codes = [read_response(sock, buf)[0] for _ in range(4)]
    assert codes == [200, 200, 200, 200]
    sock.close()


def test_more_bytes_than_declared(served: Served, data_dir: Path) -> None:
    """Bytes past Content-Length are the connection's next request: garbage there is
    uvicorn's own 400 (the connection closes), and the part itself is stored whole."""
    data = b"z" * 100
    answer = start_upload(served, {"a.bin": 100})
    url = answer["files"][0]["parts"][0]["url"]
    sock, buf = connect(url), bytearray()
    sock.sendall(head(url, 100) + data + b"garbage-not-http\r\n\r\n")
    with contextlib.suppress(EOFError, OSError):
        read_response(sock, buf)
    sock.close()
    with served.api() as http:
        got = wait_until(
            lambda: (
                (body := http.get(f"{UPLOAD_URL}/{answer['uploadId']}").json())["files"][0][
                    "receivedParts"
                ]
                and body
            ),
            "the part was never received",
            10,
        )
    (received,) = got["files"][0]["receivedParts"]
    done = complete(served, answer["uploadId"], {"a.bin": [(1, received["etag"])]})
    assert done.status_code == 201, done.text
    assert stored_bytes(data_dir, sha_of(done)) == data


def test_fewer_bytes_then_close_then_good_resend(served: Served, data_dir: Path) -> None:
    data = os.urandom(2_000_000)
    answer = start_upload(served, {"a.bin": len(data)})
    url = answer["files"][0]["parts"][0]["url"]
    sock = connect(url)
    sock.sendall(head(url, len(data)) + b"q" * 1_500_000)
    time.sleep(0.3)
    sock.close()
    time.sleep(0.5)
    r = httpx.put(url, content=data)
    assert r.status_code == 200, r.text
    done = complete(served, answer["uploadId"], {"a.bin": [(1, r.headers["etag"])]})
    assert done.status_code == 201, done.text
    assert stored_bytes(data_dir, sha_of(done)) == data


def test_resume_and_complete_before_any_part(served: Served) -> None:
    answer = start_upload(served, {"a.bin": 10, "empty.bin": 0})
    with served.api() as http:
        r = http.get(f"{UPLOAD_URL}/{answer['uploadId']}")
        assert r.status_code == 200, r.text
        assert all(f["receivedParts"] == [] for f in r.json()["files"])
    assert_error(
        complete(
            served, answer["uploadId"], {"a.bin": [(1, "0" * 32)], "empty.bin": [(1, "0" * 32)]}
        ),
        400,
    )
    assert_error(complete(served, answer["uploadId"], {"a.bin": [], "empty.bin": []}), 400)


def test_zero_size_file(served: Served, data_dir: Path) -> None:
    answer = start_upload(served, {"empty.bin": 0})
    (part,) = answer["files"][0]["parts"]
    assert part["size"] == 0
    r = httpx.put(part["url"], content=b"")
    assert r.status_code == 200, r.text
    r2 = httpx.put(part["url"], content=b"x")
    assert_error(r2, 413)
    done = complete(served, answer["uploadId"], {"empty.bin": [(1, r.headers["etag"])]})
    assert done.status_code == 201, done.text
    assert stored_bytes(data_dir, sha_of(done)) == b""


def test_concurrent_puts_of_one_part(served: Served, data_dir: Path) -> None:
    for _ in range(10):
        data = os.urandom(500_000)
        answer = start_upload(served, {"a.bin": len(data)})
        url = answer["files"][0]["parts"][0]["url"]
        socks = [connect(url) for _ in range(2)]
        for s in socks:
            s.sendall(head(url, len(data)) + data[:1000])
        time.sleep(0.05)
        results: list[Any] = [None, None]

        def send(sock: socket.socket, rest: bytes, into: list[Any], i: int) -> None:
            sock.sendall(rest)
            into[i] = read_response(sock, bytearray())

        threads = [
            threading.Thread(target=send, args=(socks[i], data[1000:], results, i))
            for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in socks:
            s.close()
        assert {r[0] for r in results} <= {200, 429}, results
        with served.api() as http:
            got = http.get(f"{UPLOAD_URL}/{answer['uploadId']}").json()
        received = got["files"][0]["receivedParts"]
        assert len(received) == 1, (results, got)
        done = complete(served, answer["uploadId"], {"a.bin": [(1, received[0]["etag"])]})
        assert done.status_code == 201, done.text
        assert stored_bytes(data_dir, sha_of(done)) == data


def test_a_stalled_in_place_body_cannot_rewrite_a_stored_blob(
    served: Served, data_dir: Path
) -> None:
    data = b"G" * 100_000
    answer = start_upload(served, {"a.bin": len(data)})
    url = answer["files"][0]["parts"][0]["url"]
    stalled = connect(url)  # the first send: claims the part, writes in place
    stalled.sendall(head(url, len(data)) + b"E" * 10)
    time.sleep(0.5)
    r = httpx.put(url, content=data)  # a re-send, to a file of its own
    assert r.status_code == 200, r.text
    done = complete(served, answer["uploadId"], {"a.bin": [(1, r.headers["etag"])]})
    assert done.status_code == 201, done.text
    sha = sha_of(done)
    assert sha == hashlib.sha256(data).hexdigest()
    stalled.sendall(b"E" * (len(data) - 10))
    stalled.settimeout(10)
    with contextlib.suppress(OSError):
        stalled.recv(65536)
    stalled.close()
    time.sleep(0.5)
    assert stored_bytes(data_dir, sha) == data


def test_staging_is_private(served: Served, data_dir: Path) -> None:
    answer = start_upload(served, {"a.bin": 10, "b.bin": 12})
    a = answer["files"][0]["parts"][0]["url"]
    assert httpx.put(a, content=b"a" * 10).status_code == 200
    sock = connect(a)  # a re-send in flight: its temporary file too
    sock.sendall(head(a, 10) + b"a")
    time.sleep(0.3)
    staging = data_dir / "blobs" / "staging" / answer["uploadId"]
    for path in [staging, *staging.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    sock.close()


def test_metadata_reads_back_exactly(served: Served) -> None:
    meta = {
        "shape": {"rankCount": 2},
        "note": None,
        "ünï": "\u2603 \U0001f600",
        "n": 1.50,
        "e": 1e400 if False else 12345678901234567890,
    }
    answer = start_upload(
        served,
        {"a.bin": 1},
        description="d\u00e9scription \U0001f600",
        tags=["x", "ü", "\u2603 tag"],
        ttlDays=3,
        workloadMetadata=meta,
    )
    with served.api() as http:
        r = http.get(f"/api/v1/tracesets/{answer['tracesetId']}")
        assert r.status_code == 200, r.text
        view = r.json()
        print(view)
        assert view["description"] == "d\u00e9scription \U0001f600"
        assert view["tags"] == ["x", "ü", "\u2603 tag"]
        assert view["ttlDays"] == 3
        assert view["workloadMetadata"] == meta
        nulls = start_upload(served, {"a.bin": 1}, description=None, tags=[], workloadMetadata=None)
        v2 = http.get(f"/api/v1/tracesets/{nulls['tracesetId']}").json()
        print(v2)
        assert v2["description"] is None and v2["tags"] == [] and v2["workloadMetadata"] is None


def test_refused_declarations_answer_json_and_keep_the_service(served: Served) -> None:
    answer = start_upload(served, {"a.bin": 100})
    url = answer["files"][0]["parts"][0]["url"]
    assert_error(httpx.put(url, content=b""), 400)
    assert_error(httpx.put(url, content=b"x" * 101), 413)
    assert_error(httpx.put(url, content=b"x" * 99), 400)

    def chunks(n: int) -> Iterator[bytes]:
        yield b"x" * n

    assert_error(httpx.put(url, content=chunks(99)), 400)
    assert_error(httpx.put(url, content=chunks(101)), 413)
    # Expect: 100-continue on a refused length: answered without the body being sent
    sock, buf = connect(url), bytearray()
    sock.sendall(head(url, 5000, "Expect: 100-continue"))
    assert_error(read_response(sock, buf), 413)
    sock.close()
    r = httpx.put(
        url, content=b"y" * 100, headers={"x-amz-checksum-sha256": checksum_b64(b"y" * 100)}
    )
    assert r.status_code == 200, r.text
    done = complete(served, answer["uploadId"], {"a.bin": [(1, r.headers["etag"])]})
    assert done.status_code == 201, done.text
    assert_error(httpx.put(url, content=b"y" * 100), 409)
    with served.api() as http:
        again = http.get(f"{UPLOAD_URL}/{answer['uploadId']}")
        assert again.status_code == 200, again.text
