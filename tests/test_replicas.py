"""Several `tracestore serve` processes on one PostgreSQL database and one S3 bucket: they
start together on an empty database, share the signing key and serve each other's URLs, and
docs/deploy.md's example runs in miniature. Real processes throughout."""

from __future__ import annotations

import hashlib
import io
import os
import random
import subprocess
import sys
import time
import zipfile
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.replica_processes import (  # noqa: F401 - the postgres and s3 fixtures
    PART,
    Replica,
    admin_token,
    bucket_replica_env,
    fresh_database,
    newest_revision,
    postgres,
    replica_env,
    replicas,
    s3,
    stop,
    wait_ready,
)
from tests.support.s3server import AWS_ENV, MotoServer
from tracestore.client import Client

pytestmark = pytest.mark.slow  # replicas as processes, on PostgreSQL and S3

ROUNDS = 5


def on(replica: Replica, url: str) -> str:
    """``url`` (minted by some replica) pointed at ``replica`` instead, as a load balancer
    in front of them all would send it anywhere."""
    path = url.split("/", 3)[3]
    return f"{replica.url}/{path}"


def test_replicas_start_together_on_an_empty_database_and_serve_each_others_urls(
    postgres: str,  # noqa: F811
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    for round_number in range(ROUNDS):
        root = tmp_path / f"round{round_number}"
        root.mkdir()
        bucket = s3.new_bucket()
        env = bucket_replica_env(
            fresh_database(postgres),
            s3,
            bucket,
        )
        with replicas(root, env) as (a, b, c):
            token = admin_token([a, b, c])
            if round_number == 0:
                upload_on_a_complete_on_b_download_via_c(a, b, c, token)


def upload_on_a_complete_on_b_download_via_c(
    a: Replica, b: Replica, c: Replica, token: str
) -> None:
    files = {"rank_0.bin": random.Random(1).randbytes(PART + 123), "notes.txt": b"two ranks\n"}
    headers = {"Authorization": f"Bearer {token}"}
    specs = [
        {
            "name": name,
            "size": len(data),
            "role": "primary" if name.endswith(".bin") else "supporting",
        }
        for name, data in files.items()
    ]
    started = httpx.post(
        f"{a.url}/api/v1/tracesets/upload-url",
        json={
            "name": "replicated",
            "files": specs,
            "workloadMetadata": {"shape": {"rankCount": 1}},
        },
        headers=headers,
        timeout=30,
    )
    assert started.status_code == 200, started.text
    session = started.json()
    complete_files = []
    for entry in session["files"]:
        data = files[entry["name"]]
        parts = []
        for part in entry["parts"]:
            offset = (part["partNumber"] - 1) * session["partSize"]
            put = httpx.put(part["url"], content=data[offset : offset + part["size"]], timeout=60)
            assert put.status_code == 200, put.text
            parts.append({"partNumber": part["partNumber"], "etag": put.headers["ETag"]})
        complete_files.append({"name": entry["name"], "parts": parts})
    done = httpx.post(
        f"{b.url}/api/v1/tracesets/upload-url/complete",
        json={"uploadId": session["uploadId"], "files": complete_files},
        headers=headers,
        timeout=120,
    )
    assert done.status_code == 201, done.text
    traceset_id = done.json()["id"]

    archive = httpx.get(
        f"{a.url}/api/v1/tracesets/{traceset_id}/download", headers=headers, timeout=30
    )
    assert archive.status_code == 200, archive.text
    zipped = httpx.get(on(c, archive.json()["url"]), timeout=60)
    assert zipped.status_code == 200, zipped.text

    with zipfile.ZipFile(io.BytesIO(zipped.content)) as opened:
        assert {n: opened.read(n) for n in opened.namelist()} == files
    for name, data in files.items():
        answer = httpx.get(
            f"{a.url}/api/v1/tracesets/{traceset_id}/download",
            params={"file": name},
            headers=headers,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        fetched = httpx.get(answer.json()["url"], timeout=60)
        assert hashlib.sha256(fetched.content).hexdigest() == hashlib.sha256(data).hexdigest()


# --- docs/deploy.md's example, in miniature ---

DEPLOY_DOC = Path(__file__).parent.parent / "docs" / "deploy.md"


def example_block(name: str) -> str:
    """The ```sh block after ``<!-- example: NAME -->`` in docs/deploy.md."""
    text = DEPLOY_DOC.read_text()
    after = text.split(f"<!-- example: {name} -->\n```sh\n", 1)[1]
    return after.split("\n```", 1)[0]


def test_the_deploy_example_runs_in_miniature(
    postgres: str,  # noqa: F811
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    bin_dir = str(Path(sys.executable).parent)  # where the `tracestore` command is
    port_a, port_b = free_port(), free_port()
    env = replica_env(
        PATH=bin_dir + os.pathsep + os.environ["PATH"],
        DATABASE_URL=fresh_database(postgres),
        BLOB_URL=f"s3://{s3.new_bucket()}/tracestore",
        S3_ENDPOINT_URL=s3.endpoint_url,
        PUBLIC_URL=f"http://127.0.0.1:{port_a}",
        TRUSTED_PROXIES="127.0.0.1",
        AWS_ACCESS_KEY_ID=AWS_ENV["AWS_ACCESS_KEY_ID"],
        AWS_SECRET_ACCESS_KEY=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        AWS_EC2_METADATA_DISABLED="true",
    )
    setup = subprocess.run(
        ["bash", "-euc", example_block("setup")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert setup.returncode == 0, setup.stderr
    assert f"is at schema revision {newest_revision()}" in setup.stdout
    token = (tmp_path / "ops-token").read_text().splitlines()[0]

    replica = example_block("replica").replace("tracestore serve", "exec tracestore serve")
    with ExitStack() as stack:
        started = []
        for index, port in enumerate((port_a, port_b)):
            command = replica.replace("--port 8000", f"--port {port}")
            log = stack.enter_context(open(tmp_path / f"replica{index}.log", "wb"))
            process = subprocess.Popen(
                ["bash", "-euc", command],
                cwd=tmp_path,
                env={**env, "TRACESTORE_DATA_DIR": str(tmp_path / f"host{index}")},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            served = Replica(f"http://127.0.0.1:{port}", tmp_path / f"replica{index}", process, log)
            stack.callback(stop, served)
            started.append(served)
        for served in started:
            assert wait_ready(served).status_code == 200, served.output()
        source = tmp_path / "traces"
        source.mkdir()
        (source / "rank_0.bin").write_bytes(random.Random(3).randbytes(1000))
        with Client(started[1].url, token) as client:
            made = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 1}})
        with Client(started[0].url, token) as client:
            assert client.get_traceset(made.id).status == "ready"
            back = client.download_traceset(made.id, tmp_path / "back")
        assert [p.read_bytes() for p in back] == [(source / "rank_0.bin").read_bytes()]

        # The Workers section's block, as written: it starts on the same settings and stops
        # cleanly on SIGTERM.
        worker_block = example_block("worker").replace(
            "tracestore worker", "exec tracestore worker"
        )
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                ["bash", "-euc", worker_block], cwd=tmp_path, env=env, stdout=log, stderr=log
            )
            deadline = time.monotonic() + 60
            while "running jobs from" not in (tmp_path / "worker.log").read_text():
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline, "the worker did not start in 60 s"
                time.sleep(0.2)
            worker.terminate()
            assert worker.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
