"""End to end through real processes: a `tracestore serve` subprocess on a free port, and
`tracestore` commands as subprocesses against it (one of them SIGKILLed mid-upload)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest

from tests.support.served import (
    MIB,
    PART,
    Served,
    assert_downloaded,
    make_traces,
    serving,
    start_upload,
    tracestore,
    write_meta,
)
from tests.support.uploading import complete, put_parts, request_upload
from tests.support.waiting import wait_until
from tracestore.client import Client

pytestmark = pytest.mark.slow  # a server process and several CLI processes per test


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("served") / "data") as server:
        yield server


def test_upload_show_download_round_trip(served: Served, tmp_path: Path) -> None:
    files = make_traces(tmp_path / "traces", [PART * 2 + 17, 0, 4096])
    meta = write_meta(tmp_path / "meta.json", 3)

    uploaded = tracestore(
        served, "upload", str(tmp_path / "traces"), "--workload-metadata", str(meta)
    )
    assert uploaded.returncode == 0, uploaded.stderr
    traceset_id = uploaded.stdout.split()[0]

    shown = tracestore(served, "show", traceset_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["status"] == "ready"
    assert view["rankCountDerived"] == 3
    assert view["workloadMetadata"] == {"shape": {"rankCount": 3}, "precision": "bf16"}
    assert {f["name"]: f["size"] for f in view["files"]} == {n: len(d) for n, d in files.items()}

    assert_downloaded(served, traceset_id, tmp_path / "out", files)


def test_sigkilled_upload_resumes_byte_exact(served: Served, tmp_path: Path) -> None:
    files = make_traces(tmp_path / "traces", [64 * MIB + 5, 48 * MIB, 40 * MIB + 1, 7])
    meta = write_meta(tmp_path / "meta.json", 4)
    process, upload_id = start_upload(served, tmp_path / "traces", meta)

    client = Client(served.url, served.token)

    def two_parts_in() -> bool:
        assert process.poll() is None, "the upload ended before it could be killed"
        session = client.resume_upload(upload_id)
        return sum(len(f.received_parts) for f in session.files) >= 2

    wait_until(two_parts_in, "two parts never arrived", timeout=120, every=0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL

    session = client.resume_upload(upload_id)
    missing = sum(len(f.parts) for f in session.files)
    assert session.state == "open" and missing > 0, "killed after every part was sent"

    resumed = tracestore(
        served, "upload", "--resume", upload_id, str(tmp_path / "traces"), "--json"
    )
    assert resumed.returncode == 0, resumed.stderr
    view = json.loads(resumed.stdout)
    assert view["status"] == "ready"
    assert view["id"] == session.traceset_id
    assert_downloaded(served, view["id"], tmp_path / "out", files)
    client.close()


def test_ctrl_c_prints_the_resume_command(served: Served, tmp_path: Path) -> None:
    files = make_traces(tmp_path / "traces", [30 * MIB, 30 * MIB + 3])
    meta = write_meta(tmp_path / "meta.json", 2)
    process, upload_id = start_upload(served, tmp_path / "traces", meta)
    client = Client(served.url, served.token)

    def a_part_in() -> bool:
        assert process.poll() is None, "the upload ended before it could be interrupted"
        return any(f.received_parts for f in client.resume_upload(upload_id).files)

    wait_until(a_part_in, "no part arrived", timeout=120, every=0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert f"Interrupted; resume with: tracestore upload --resume {upload_id} " in stderr
    assert client.resume_upload(upload_id).state == "open"

    resumed = tracestore(served, "upload", "--resume", upload_id, str(tmp_path / "traces"))
    assert resumed.returncode == 0, resumed.stderr
    assert_downloaded(served, resumed.stdout.split()[0], tmp_path / "out", files)
    client.close()


def test_two_worker_processes_share_one_data_directory(tmp_path: Path) -> None:
    """Parallel parts of one file may land on either worker (each hashes only what it
    receives); whichever completes falls back to hashing the staged bytes when its running
    digest lacks parts, and the traceset is exact either way."""
    files = make_traces(tmp_path / "traces", [PART * 6 + 3, PART * 4])
    with serving(tmp_path / "data", "--workers", "2") as server:
        with Client(server.url, server.token) as client:
            traceset = client.upload_traceset(
                [tmp_path / "traces"],
                name="two workers",
                workload_metadata={"shape": {"rankCount": 2}},
                concurrency=6,
            )
            assert traceset.status == "ready"
            hashes = {f.name: f.hash for f in client.get_traceset(traceset.id).files}
        assert hashes == {n: "sha256:" + hashlib.sha256(d).hexdigest() for n, d in files.items()}
        assert_downloaded(server, traceset.id, tmp_path / "out", files)


def test_a_part_cut_off_mid_body_is_not_held_and_its_resend_completes(
    served: Served, tmp_path: Path
) -> None:
    # `tracestore serve` receives part bodies straight from the socket
    # (server/serving/body_protocol.py): a sender that goes away half-way leaves no part, and
    # the part's next send is whole.
    data = os.urandom(2 * PART + 1234)
    with httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {served.token}"}, timeout=60
    ) as http:
        answer = request_upload(http, {"r.bin": (data, "primary")}, {"shape": {"rankCount": 1}})
        assert answer.status_code == 200, answer.text
        upload = answer.json()
        parts = upload["files"][0]["parts"]
        url = httpx.URL(parts[1]["url"])
        with socket.create_connection((url.host, url.port), timeout=30) as sock:
            target = url.raw_path.decode()
            sock.sendall(
                f"PUT {target} HTTP/1.1\r\nHost: {url.host}\r\n"
                f"Content-Length: {parts[1]['size']}\r\n\r\n".encode()
                + data[PART : PART + PART // 2]
            )
        time.sleep(0.5)
        held = http.get(f"/api/v1/tracesets/upload-url/{upload['uploadId']}").json()
        assert held["files"][0]["receivedParts"] == []
        assert len(held["files"][0]["parts"]) == 3
        etags = put_parts(http, upload, {"r.bin": (data, "primary")})
        done = complete(
            http, upload["uploadId"], etags, {"r.bin": hashlib.sha256(data).hexdigest()}
        )
        assert done.status_code == 201, done.text
        files = {"r.bin": data}
        assert_downloaded(served, done.json()["id"], tmp_path / "out", files)


def test_an_idle_keep_alive_connection_outlives_a_load_balancers_idle_timeout(
    tmp_path: Path,
) -> None:
    """uvicorn closed a connection idle for 5 s; a client (or balancer) that reused it just
    then got no answer (a CI run saw one). serve keeps it longer than the common 60 s of a
    balancer: a request after 6 idle seconds is answered on the same connection."""
    with serving(tmp_path / "data") as served:
        host, port = served.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            sockets = []
            for idle in (0, 6):
                time.sleep(idle)
                connection.request("GET", "/healthz")
                answer = connection.getresponse()  # RemoteDisconnected had it been closed
                assert answer.status == 200
                answer.read()
                sockets.append(connection.sock)
            assert sockets[0] is sockets[1]  # the same connection, not a new one
        finally:
            connection.close()


def _read_answer(reader: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    status = int(reader.readline().split()[1])
    headers = {}
    while (line := reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, reader.read(int(headers["content-length"]))


def test_blob_downloads_and_part_puts_pipelined_on_one_connection(
    served: Served, tmp_path: Path
) -> None:
    # A blob goes out by sendfile (server/serving/pathsend.py), a part comes in straight from
    # the socket (server/serving/body_protocol.py): in turn on one connection, requests sent
    # ahead of their answers, each answer whole and in order.
    blob = make_traces(tmp_path / "traces", [2 * PART + 3])["rank_0.json"]
    with Client(served.url, served.token) as client:
        traceset = client.upload_traceset(tmp_path / "traces", role="supporting")
        url = httpx.URL(client.download_url(traceset.id, "rank_0.json").url)
    body = os.urandom(2 * PART + 5)
    with served.api() as api:
        answer = request_upload(api, {"p.bin": (body, "supporting")})
        assert answer.status_code == 200, answer.text
        upload = answer.json()
        get = f"GET {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.host}\r\n\r\n".encode()
        wire = get
        parts = upload["files"][0]["parts"]
        for part in parts:
            offset = (part["partNumber"] - 1) * upload["partSize"]
            target = httpx.URL(part["url"]).raw_path.decode()
            head = f"PUT {target} HTTP/1.1\r\nHost: {url.host}\r\nContent-Length: {part['size']}"
            wire += head.encode() + b"\r\n\r\n" + body[offset : offset + part["size"]] + get
        with socket.create_connection((url.host, url.port), timeout=30) as sock:
            sender = threading.Thread(target=sock.sendall, args=(wire,))
            sender.start()
            reader = sock.makefile("rb")
            assert _read_answer(reader)[::2] == (200, blob)
            etags = []
            for part in parts:
                status, headers, _ = _read_answer(reader)
                assert status == 200
                etags.append({"partNumber": part["partNumber"], "etag": headers["etag"]})
                assert _read_answer(reader)[::2] == (200, blob)
            sender.join()
        done = complete(api, upload["uploadId"], {"p.bin": etags})
        assert done.status_code == 201, done.text


def test_the_first_admin_token_is_only_in_its_private_file(tmp_path: Path) -> None:
    """serve printed the token it created (and the app's lifespan logged it): it belongs
    only in the 0600 file, whose place is what the output names (issue 41)."""
    data_dir = tmp_path / "data"
    with serving(data_dir) as served:
        pass
    output = (tmp_path / "server.log").read_text()
    token_file = data_dir / "admin-token"
    assert served.token.startswith("tst_")
    assert served.token not in output
    assert served.token[4:12] not in output  # not even a part of it
    assert str(token_file.resolve()) in output
    assert token_file.stat().st_mode & 0o777 == 0o600


def test_an_app_that_bootstraps_logs_where_the_token_is_not_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fastapi.testclient import TestClient

    from tracestore.server.app import create_app
    from tracestore.server.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", in_process_worker=False)
    with caplog.at_level("INFO"), TestClient(create_app(settings)) as http:
        assert http.get("/healthz").status_code == 200
    token = (tmp_path / "data" / "admin-token").read_text().strip()
    assert token.startswith("tst_")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert str(tmp_path / "data" / "admin-token") in logged
    assert token not in logged
