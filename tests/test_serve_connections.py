"""A real ``tracestore serve`` against connections that never finish their headers (issue 41):
20,800 of them, idle or sending a header byte every few seconds, were held for good; the
process ran out of descriptors, its log grew a traceback per failed accept, and
well-behaved clients got no answer for half a minute. And against clients that ask for a
download and then stop reading it: each held its connection for good."""

from __future__ import annotations

import contextlib
import io
import os
import re
import resource
import signal
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.attackers import server_log
from tests.support.processes import exited
from tests.support.served import MIB, Served, serving
from tests.support.waiting import wait_until
from tracestore.client import Client

pytestmark = pytest.mark.slow  # a server process per test

# serve's descriptors: with 1024, it holds at most (1024 - 256) // 3 = 256 connections.
OPEN_FILES = 1024
ATTACKERS = 1300  # past the descriptor limit: every one held was the outage


def _address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    return parts.hostname or "", parts.port or 80


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (reads its end or a reset) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
    return False


@pytest.fixture
def attackers_files() -> Iterator[None]:
    """This process may open the attack's sockets (its soft limit raised for the test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = ATTACKERS + 256
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this process may open {hard} files; the attack needs {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def slow_headers(tmp_path: Path) -> Iterator[tuple[Served, Path]]:
    data_dir = tmp_path / "data"
    env = {"TRACESTORE_HEADER_TIMEOUT": "1", "TRACESTORE_IDLE_TIMEOUT": "2"}
    with serving(data_dir, env=env) as served:
        yield served, data_dir


def test_a_connection_is_closed_when_its_headers_or_first_byte_are_late(
    slow_headers: tuple[Served, Path],
) -> None:
    served, _ = slow_headers
    idle = socket.create_connection(_address(served), timeout=10)
    trickling = socket.create_connection(_address(served), timeout=10)
    answered: socket.socket | None = None
    try:
        trickling.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        with contextlib.suppress(OSError):  # closed while it trickles
            for byte in b"Host: x\r\n":  # a byte every 0.2 s: not whole within the deadline
                trickling.sendall(bytes([byte]))
                time.sleep(0.2)
        assert _closed_within(trickling, 10)
        assert time.monotonic() - started < 10
        # A new connection that sends nothing is closed after the idle deadline.
        assert _closed_within(idle, 10)
        # One whose headers come whole is answered, and then kept while idle.
        answered = socket.create_connection(_address(served), timeout=10)
        answered.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answered.settimeout(10)
        assert answered.recv(64).startswith(b"HTTP/1.1 200")
        assert not _closed_within(answered, 0.5)
    finally:
        for sock in (idle, trickling, answered):
            if sock is not None:
                sock.close()


@pytest.mark.usefixtures("attackers_files")
def test_slow_header_connections_past_the_descriptor_limit_shut_no_client_out(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    with serving(data_dir, open_files=OPEN_FILES) as served:
        address = _address(served)
        held: list[socket.socket] = []
        stop, opened = threading.Event(), threading.Event()

        def attack() -> None:
            # Half idle, half with a request line and then a header byte now and then.
            for i in range(ATTACKERS):
                if stop.is_set():
                    return
                try:
                    sock = socket.create_connection(address, timeout=5)
                    if i % 2:
                        sock.sendall(b"GET /healthz HTTP/1.1\r\nX")
                except OSError:
                    continue  # refused or reset: the server is shedding them
                held.append(sock)
            opened.set()
            while not stop.wait(1.0):
                for sock in held[1::2]:
                    with contextlib.suppress(OSError):
                        sock.send(b"x")

        attacker = threading.Thread(target=attack)
        attacker.start()
        answered = 0
        try:
            # A fresh connection per request, as new clients come, each answered within the
            # client's 12 s (the outage was ~25 s), all through the attack and 5 s after.
            with httpx.Client(base_url=served.url, timeout=12) as good:
                bound = time.monotonic() + 90
                after: float | None = None
                while after is None or time.monotonic() < after:
                    assert time.monotonic() < bound, "the attack never got its connections in"
                    response = good.get("/healthz", headers={"Connection": "close"})
                    assert response.status_code == 200
                    answered += 1
                    if after is None and len(held) >= ATTACKERS // 2 and opened.is_set():
                        after = time.monotonic() + 5
                    time.sleep(0.02)
        finally:
            stop.set()
            attacker.join(30)
            for sock in held:
                sock.close()
        assert answered > 10
    log = server_log(data_dir)
    assert "Traceback" not in log
    assert "Too many open files" not in log
    assert "waiting connections closed at the cap" in log
    assert len(log) < 64 * 1024


def test_past_the_cap_the_longest_waiting_connection_gives_way(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"TRACESTORE_MAX_CONNECTIONS": "4"}
    with serving(data_dir, env=env) as served:
        idle = [socket.create_connection(_address(served), timeout=10) for _ in range(8)]
        try:
            with httpx.Client(base_url=served.url, timeout=5) as good:
                assert good.get("/healthz").status_code == 200
            assert [_closed_within(sock, 5) for sock in idle[:4]] == [True] * 4
            assert not any(_closed_within(sock, 0.2) for sock in idle[-2:])
        finally:
            for sock in idle:
                sock.close()
    assert "waiting connections closed at the cap" in server_log(data_dir)


@pytest.mark.usefixtures("attackers_files")
def test_a_cap_past_the_open_file_limit_is_warned_about_and_failed_accepts_cost_a_line(
    tmp_path: Path,
) -> None:
    """Set past what its descriptors allow, the cap never closes anything: the process runs
    out of descriptors, and asyncio's accept failed (and logged a traceback) thousands of
    times a second. It costs a line now and then."""
    data_dir = tmp_path / "data"
    env = {"TRACESTORE_MAX_CONNECTIONS": "5000"}
    with serving(data_dir, env=env, open_files=OPEN_FILES) as served:
        held = []
        try:
            # Past the descriptors, within what the listen queue then holds (no SYN dropped).
            for _ in range(OPEN_FILES + 64):
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection(_address(served), timeout=5))
            deadline = time.monotonic() + 20
            while "accepts failed" not in server_log(data_dir):
                assert time.monotonic() < deadline, "no accept failed"
                time.sleep(0.1)
            time.sleep(1)  # a second more of asyncio retrying its accepts
        finally:
            for sock in held:
                sock.close()
    log = server_log(data_dir)
    assert (
        "Warning: TRACESTORE_MAX_CONNECTIONS=5000 is more than 1024 open files allow (256)" in log
    )
    assert "Too many open files" in log  # named, once
    assert "Traceback" not in log
    assert len(log) < 64 * 1024


SEND_TIMEOUT = 5.0  # seconds a loaded machine cannot take between two reads of the slow reader
DOWNLOAD = 32 * MIB  # far more than the socket buffers on both sides hold
SMALL_RCVBUF = 64 * 1024
UNREAD = "closed with their answers unread"


def _get(url: str) -> socket.socket:
    """A connection with a small receive buffer that has sent ``GET url``."""
    target = httpx.URL(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
    sock.settimeout(10)
    sock.connect((target.host, target.port or 80))
    request = f"GET {target.raw_path.decode()} HTTP/1.1\r\nHost: {target.host}\r\n\r\n"
    sock.sendall(request.encode())
    return sock


def _read_slowly(sock: socket.socket, slow_for: float, into: bytearray) -> None:
    """Read 64 KiB every 0.3 s for ``slow_for`` seconds, then the rest of the answer as
    fast as it comes."""
    slow_until = time.monotonic() + slow_for
    while time.monotonic() < slow_until:
        into += sock.recv(64 * 1024)
        time.sleep(0.3)
    while (head_end := into.find(b"\r\n\r\n")) < 0:
        into += sock.recv(64 * 1024)
    length = next(
        int(line.split(b":")[1])
        for line in into[:head_end].split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(into) < head_end + 4 + length:
        chunk = sock.recv(1024 * 1024)
        assert chunk, "the answer ended early"
        into += chunk


@pytest.mark.parametrize("what", ["file", "archive"])
def test_a_download_not_read_is_closed_after_the_send_deadline_a_slow_one_is_not(
    tmp_path: Path, what: str
) -> None:
    # A file is sent from disk (pathsend.py), an archive streamed as a ZIP: a client that
    # stopped reading either held its connection (and the answer) for good.
    data_dir, source = tmp_path / "data", tmp_path / "traces"
    source.mkdir()
    data = os.urandom(DOWNLOAD)
    (source / "big.bin").write_bytes(data)
    answer = bytearray()
    with serving(data_dir, env={"TRACESTORE_SEND_TIMEOUT": f"{SEND_TIMEOUT:g}"}) as served:
        with Client(served.url, served.token) as client:
            traceset = client.upload_traceset(source, role="supporting")
            url = client.download_url(traceset.id, "big.bin" if what == "file" else None).url
        slow, stalled = _get(url), _get(url)
        reader = threading.Thread(target=_read_slowly, args=(slow, 2 * SEND_TIMEOUT, answer))
        reader.start()
        try:
            # The stalled client reads nothing: the server's writes pause, and after the
            # deadline its connection is closed, and logged.
            started = time.monotonic()
            with httpx.Client(base_url=served.url, timeout=12) as other:
                while UNREAD not in server_log(data_dir):
                    assert time.monotonic() - started < SEND_TIMEOUT + 15, "never closed"
                    assert other.get("/healthz").status_code == 200
                    time.sleep(0.2)
            # What the kernels buffered on the way may still come, then the end (or a reset).
            received = 0
            with contextlib.suppress(ConnectionError):
                while chunk := stalled.recv(1024 * 1024):
                    received += len(chunk)
            assert received < DOWNLOAD
            reader.join(30)
            assert not reader.is_alive()
        finally:
            slow.close()
            stalled.close()
    # The slow reader, never stalled for the deadline, got the whole answer.
    body = bytes(answer[answer.index(b"\r\n\r\n") + 4 :])
    if what == "archive":
        body = zipfile.ZipFile(io.BytesIO(body)).read("big.bin")
    assert len(body) == len(data)
    assert body == data
    # Logged once; and the stalled answer was released, not left for the shutdown to cancel.
    log = server_log(data_dir)
    named = [line for line in log.splitlines() if "TRACESTORE_SEND_TIMEOUT" in line]
    assert len(named) == 1
    assert named[0].endswith(
        f"connections: 1 {UNREAD} in the last 10 s (TRACESTORE_SEND_TIMEOUT {SEND_TIMEOUT:g} s)"
    )
    assert "Traceback" not in log
    assert "graceful shutdown exceeded" not in log


def _exited_within(pid: int, seconds: float) -> float | None:
    """Seconds until process ``pid`` (a child, not yet reaped) exits, or None after
    ``seconds``."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        if exited(pid):
            return elapsed
        time.sleep(0.05)
    return None


def test_a_shutdown_does_not_wait_its_grace_for_answers_nobody_reads(tmp_path: Path) -> None:
    # A send deadline longer than the shutdown's grace (as by default: 120 s and 20 s) let
    # a client that stopped reading hold a restart for the whole grace, after which each
    # of its answers was cancelled with a traceback. During a shutdown the deadline fits
    # within the grace.
    data_dir, source = tmp_path / "data", tmp_path / "traces"
    source.mkdir()
    (source / "big.bin").write_bytes(os.urandom(DOWNLOAD))
    # Stalled answers are cut at half the grace (checked every 0.75 s); the rest of the grace
    # is the exit's, which a loaded machine (a process under coverage) may take seconds for.
    grace = 16.0
    env = {"TRACESTORE_SEND_TIMEOUT": "60", "TRACESTORE_SHUTDOWN_GRACE": f"{grace:g}"}
    with serving(data_dir, env=env) as served:
        with Client(served.url, served.token) as client:
            traceset = client.upload_traceset(source, role="supporting")
            urls = [client.download_url(traceset.id, "big.bin").url]
            urls.append(client.download_url(traceset.id).url)
        stalled = [_get(url) for url in urls]  # a file and an archive, neither read
        try:
            time.sleep(1.5)  # both answers wait on full sockets
            os.kill(served.pid, signal.SIGTERM)
            took = _exited_within(served.pid, grace + 5)
        finally:
            for sock in stalled:
                sock.close()
    log = server_log(data_dir)
    assert took is not None, "never exited"
    assert took < grace - 3, f"exited after {took:.1f} s"
    assert "graceful shutdown exceeded" not in log
    assert "Traceback" not in log
    # Both cut-offs are said before the process ends, not only the first of its window.
    said = re.findall(rf"connections: (\d+) {UNREAD} in the last", log)
    assert sum(map(int, said)) == 2, log[-2000:]


def _open_blobs(pid: int) -> list[str]:
    """The stored blob files process ``pid`` holds open."""
    opened = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if "/blobs/" in (target := os.readlink(fd)):
                opened.append(target)
    return opened


def test_an_archive_cut_off_or_left_closes_its_blob_files_at_once(tmp_path: Path) -> None:
    # The streamed ZIP reads each blob inside a generator: an answer that ended early (its
    # client gone, or cut off by the send deadline) left the generator, and the file it had
    # open, to the next cyclic garbage collection, which an idle server may not run for long.
    data_dir, source = tmp_path / "data", tmp_path / "traces"
    source.mkdir()
    (source / "big.bin").write_bytes(os.urandom(DOWNLOAD))
    with serving(data_dir, env={"TRACESTORE_SEND_TIMEOUT": "1"}) as served:
        with Client(served.url, served.token) as client:
            traceset = client.upload_traceset(source, role="supporting")
            url = client.download_url(traceset.id, None).url
        stalled = [_get(url) for _ in range(3)]  # cut off by the deadline
        for sock in [_get(url) for _ in range(3)]:  # gone after their first bytes
            assert sock.recv(65536)
            sock.close()
        try:
            wait_until(
                lambda: UNREAD in server_log(data_dir) and not _open_blobs(served.pid),
                timeout=15,
                what=lambda: f"blob files still open: {_open_blobs(served.pid)}",
            )
        finally:
            for sock in stalled:
                sock.close()
    assert "Traceback" not in server_log(data_dir)
