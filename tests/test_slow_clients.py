"""Slow clients (issue 15): 200 connections against one real `tracestore serve` that send a
part's headers and then trickle its body a byte at a time or stall, while a well-behaved
client lists and uploads. The good client's work completes and its median latency stays
within 2 × what it was before the attack."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.attackers import (
    open_body,
    other_session_parts,
    server_log,
    start_upload,
)
from tests.support.processes import exited
from tests.support.served import Served, serving
from tracestore.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.engine_independent]

SESSIONS = 10
FILES_PER_SESSION = 20  # within the per-session body limit: every attacker is admitted
TRICKLE_EVERY = 0.25  # seconds between the bytes of a trickling body


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path / "data") as server:
        yield server


def _good_client_medians(served: Served, source: Path, rounds: int) -> tuple[float, float]:
    """Median seconds of a first-page list and of a whole two-file upload."""
    lists, uploads = [], []
    with served.api() as api, Client(served.url, served.token) as client:
        for _ in range(rounds):
            start = time.perf_counter()
            assert api.get("/api/v1/tracesets", params={"limit": 20}).status_code == 200
            lists.append(time.perf_counter() - start)
        for _ in range(max(3, rounds // 4)):
            start = time.perf_counter()
            traceset = client.upload_traceset(source, role="supporting")
            uploads.append(time.perf_counter() - start)
            assert traceset.status == "ready"
    return statistics.median(lists), statistics.median(uploads)


def test_two_hundred_slow_bodies_do_not_slow_a_good_client(served: Served, tmp_path: Path) -> None:
    source = tmp_path / "good"
    source.mkdir()
    (source / "a.bin").write_bytes(b"a" * 100_000)
    (source / "b.bin").write_bytes(b"b" * 200_000)
    _good_client_medians(served, source, 4)  # warm: connections, caches, first inspection
    list_before, upload_before = _good_client_medians(served, source, 40)

    attackers: list[socket.socket] = []
    for _ in range(SESSIONS):
        answer = start_upload(served, {f"f{i}.bin": 10_000 for i in range(FILES_PER_SESSION)})
        for entry in answer["files"]:
            attackers.append(open_body(entry["parts"][0]["url"], 10_000, b"x"))
    trickling, stalled = attackers[::2], attackers[1::2]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(TRICKLE_EVERY):
            for sock in trickling:
                with contextlib.suppress(OSError):  # one the service closed
                    sock.send(b"x")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        time.sleep(1.0)  # every attacker admitted and waiting
        list_during, upload_during = _good_client_medians(served, source, 40)
        # Every attacking connection is still held open by the service, none refused.
        for sock in stalled:
            sock.settimeout(0.001)
            with pytest.raises(TimeoutError):
                sock.recv(1)
    finally:
        stop.set()
        trickler.join(timeout=5)
        for sock in attackers:
            sock.close()
    assert len(attackers) == 200
    # Issue 15's bound: within 2x the unloaded value, measured before and again after the
    # attack (medians of 40 lists and 10 uploads each), so that a shared machine growing
    # busier meanwhile is not taken for the attack's cost; the larger bracket is the value.
    time.sleep(0.5)  # the service has let the attackers' connections go
    list_after, upload_after = _good_client_medians(served, source, 40)
    list_unloaded, upload_unloaded = max(list_before, list_after), max(upload_before, upload_after)
    assert list_during <= 2 * list_unloaded, (list_before, list_during, list_after)
    assert upload_during <= 2 * upload_unloaded, (upload_before, upload_during, upload_after)


TRICKLERS = 6  # sessions, each sending as many bodies as one process admits per session
TRICKLE_FAST = 0.03  # a byte this often: never idle long enough to park its body


@pytest.mark.parametrize("workers", [1, 2])
def test_bodies_that_trickle_without_pause_hold_no_body_thread(
    tmp_path: Path, workers: int
) -> None:
    """Bodies that each send a byte every 30 ms (never idle, far below any useful rate) from
    several sessions, more of them than a process has body threads, while another session's
    parts go in: with ``--workers 2`` too, whose processes count their bodies apart."""
    from tracestore.server.receiving import BODY_LIMITS
    from tracestore.server.serving.body_protocol import BODY_THREADS

    with serving(tmp_path / "data", "--workers", str(workers)) as served:
        attackers: list[socket.socket] = []
        per_session = BODY_LIMITS.per_session
        for _ in range(TRICKLERS):
            answer = start_upload(served, {f"f{i}.bin": 10_000 for i in range(per_session)})
            for entry in answer["files"]:
                attackers.append(open_body(entry["parts"][0]["url"], 10_000, b"x"))
        assert len(attackers) > workers * BODY_THREADS
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(TRICKLE_FAST):
                for sock in attackers:
                    with contextlib.suppress(OSError):
                        sock.send(b"x")

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        try:
            time.sleep(1.0)  # every body admitted and trickling
            took = other_session_parts(served, timeout=60)
        finally:
            stop.set()
            trickler.join(timeout=5)
            for sock in attackers:
                sock.close()
    # ~1 s here; parts waiting for a body thread wait out their 60 s timeout.
    assert took < 20, f"20 small parts of another session took {took:.1f} s"


def test_a_stopping_serve_does_not_wait_for_ever_on_a_client_that_stopped(
    tmp_path: Path,
) -> None:
    """A download whose client stopped reading and a part body that stalled, both open when
    ``serve`` is told to stop: it cancels them after ``TRACESTORE_SHUTDOWN_GRACE`` and exits
    (before, it waited on the download for good)."""
    source = tmp_path / "traces"
    source.mkdir()
    (source / "big.bin").write_bytes(b"\x5a" * (32 * 1024 * 1024))  # more than socket buffers
    env = {"TRACESTORE_SHUTDOWN_GRACE": "1.5"}
    with serving(tmp_path / "data", env=env) as served:
        with Client(served.url, served.token) as client:
            traceset = client.upload_traceset(source, role="supporting")
            url = urlsplit(client.download_url(traceset.id, "big.bin").url)
        reader = socket.create_connection((url.hostname or "", url.port or 80), timeout=30)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        reader.sendall(f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        assert reader.recv(64).startswith(b"HTTP/1.1 200")  # then it reads no more
        answer = start_upload(served, {"stalled.bin": 10_000})
        stalled = open_body(answer["files"][0]["parts"][0]["url"], 10_000, b"x")
        time.sleep(0.5)
        started = time.monotonic()
        os.kill(served.pid, signal.SIGTERM)
        while not exited(served.pid):
            assert time.monotonic() - started < 15, "serve still waits on its stopped clients"
            time.sleep(0.05)
        took = time.monotonic() - started
        reader.close()
        stalled.close()
    assert 1.4 < took < 15, took
    assert "timeout graceful shutdown exceeded" in server_log(tmp_path / "data")
