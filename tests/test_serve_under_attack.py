"""A real ``tracestore serve`` attacked from outside through raw sockets: what it logs, and
that no client can stall it for the others (issue 15)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.support.attackers import open_body, other_session_parts, server_log, start_upload
from tests.support.served import Served, serving
from tests.support.waiting import wait_until
from tracestore.client import Client, RetryPolicy, RetryWait

pytestmark = pytest.mark.slow  # a server process per module

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attacked") / "data"


@pytest.fixture(scope="module")
def served(data_dir: Path) -> Iterator[Served]:
    with serving(data_dir) as server:
        yield server


def test_the_log_holds_no_signature_and_no_traceback_for_a_dropped_part(
    served: Served, data_dir: Path
) -> None:
    answer = start_upload(served, {"a.bin": 1000, "b.bin": 10})
    dropped, whole = (entry["parts"][0]["url"] for entry in answer["files"])
    open_body(dropped, 1000, b"x" * 10).close()
    assert httpx.put(whole, content=b"y" * 10).status_code == 200
    # Both PUTs logged: the dropped body's end once its thread notices.
    log = wait_until(
        lambda: (text := server_log(data_dir)).count("PUT /blobs/parts") >= 2 and text,
        lambda: f"both part PUTs were not logged:\n{server_log(data_dir)}",
        10,
    )
    for url in (dropped, whole):
        signature = parse_qs(urlsplit(url).query)["signature"][0]
        assert signature not in log
    assert "signature=REDACTED" in log
    assert "Traceback" not in log
    assert " 500" not in log


def test_an_upload_started_while_the_service_restarts_rides_it_out(tmp_path: Path) -> None:
    # The client has seen the service answer: a refused connection is a restart, waited
    # out with the long patience (one that never answered is a wrong URL: test_cli.py).
    data_dir = tmp_path / "data"
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.bin").write_bytes(os.urandom(6 * MIB))
    waits: list[RetryWait] = []
    outcome: dict[str, Any] = {}
    with serving(data_dir) as first:
        port = urlsplit(first.url).port
        client = Client(first.url, first.token, retry=RetryPolicy(on_wait=waits.append))
        client.list_page()

    def upload() -> None:
        with client:
            try:
                outcome["traceset"] = client.upload_traceset(source, role="supporting")
            except Exception as exc:  # reported by the assertion below
                outcome["error"] = exc

    uploading = threading.Thread(target=upload)
    uploading.start()  # while nothing listens: the service is restarting
    time.sleep(3)
    with serving(data_dir, port=port) as second:
        uploading.join(timeout=120)
        assert "error" not in outcome, outcome
        assert outcome["traceset"].status == "ready"
        assert waits and all(w.reason.code == "NETWORK_ERROR" for w in waits)
        with Client(second.url, second.token) as client:
            copy = client.download_traceset(outcome["traceset"].id, tmp_path / "copy")
    assert copy[0].read_bytes() == (source / "a.bin").read_bytes()


def test_the_default_retry_budget_outlasts_a_half_minute_restart() -> None:
    policy = RetryPolicy()
    assert not policy.gives_up(20, time.monotonic() - 45)
    assert policy.gives_up(20, time.monotonic() - policy.patience)
    # Enough tries that the time, not their count, ends the waiting: on average (full
    # jitter, half of each delay's cap) they last twice the patience.
    assert (
        sum(min(policy.max_delay, policy.base_delay * 2**a) for a in range(policy.attempts)) / 2
        > 2 * policy.patience
    )


def _status_if_answered(sock: socket.socket, wait: float) -> int | None:
    """The status of an answer that arrives within ``wait`` seconds, else None."""
    sock.settimeout(wait)
    try:
        line = sock.recv(64)
    except TimeoutError:
        return None
    return int(line.split()[1]) if line else None


def test_an_attacked_session_holds_its_own_slots_and_other_sessions_flow(
    served: Served,
) -> None:
    from tracestore.server.receiving import BODY_LIMITS

    files = 70  # more bodies than the service has body threads
    attacked = start_upload(served, {f"f{i}.bin": 1000 for i in range(files)})
    urls = [entry["parts"][0]["url"] for entry in attacked["files"]]
    # Each sends its headers and one byte of its body, then nothing.
    idle = [open_body(url, 1000, b"x") for url in urls]
    again = [open_body(urls[0], 1000, b"x") for _ in range(3)]
    try:
        refused = [
            _status_if_answered(sock, 2.0 if i == 0 else 0.05) for i, sock in enumerate(idle)
        ]
        assert refused.count(429) == files - BODY_LIMITS.per_session
        assert refused.count(None) == BODY_LIMITS.per_session
        assert [_status_if_answered(sock, 0.5) for sock in again] == [429] * 3
        # Meanwhile another session's parts go in and out as ever.
        assert other_session_parts(served) < 10
    finally:
        for sock in idle + again:
            sock.close()
