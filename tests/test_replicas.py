"""Several `tracestore serve` processes on one PostgreSQL database and one S3 bucket: they
start together on an empty database, share the signing key, and refuse to start (or to
administer) with one line when a dependency is missing. Real processes throughout."""

from __future__ import annotations

import hashlib
import io
import os
import random
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from tests.pgserver import PostgresServer
from tests.ports import free_port
from tests.processes import stop_process
from tests.s3server import AWS_ENV, MotoServer
from tracestore.cli import main
from tracestore.client import Client
from tracestore.errors import Forbidden
from tracestore.server import migrations
from tracestore.server.database import Database, schema_exists
from tracestore.server.presigned import UrlSigner, rotate_signing_key, signing_keys
from tracestore.server.services import url_signer
from tracestore.server.settings import Settings

MIB = 1024 * 1024
PART = 5 * MIB
ROUNDS = 5
REPLICAS = 3


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL server URL (the session's when the PostgreSQL pass runs, else one of our
    own): each test makes its own empty database on it."""
    shared = os.environ.get("TRACESTORE_TEST_DATABASE_URL")
    if shared:
        yield shared
        return
    with PostgresServer() as server:
        yield server.url


def fresh_database(server_url: str) -> str:
    """An empty database (no schema at all) on the server; its URL."""
    name = "r_" + os.urandom(6).hex()
    admin = server_url.rpartition("/")[0] + "/postgres"
    with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return server_url.rpartition("/")[0] + "/" + name


@dataclass
class Replica:
    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def output(self) -> str:
        self.log.flush()
        return (self.data_dir.parent / f"{self.data_dir.name}.log").read_text(errors="replace")


def replica_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACESTORE_", "AWS_"))}
    env["TRACESTORE_PART_SIZE"] = str(PART)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return {**env, **settings}


def start_replica(data_dir: Path, env: dict[str, str], *args: str) -> Replica:
    port = free_port()
    log = open(data_dir.parent / f"{data_dir.name}.log", "wb")  # noqa: SIM115 - closed in stop
    command = [sys.executable, "-m", "tracestore.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return Replica(f"http://127.0.0.1:{port}", data_dir, process, log)


def wait_ready(replica: Replica, timeout: float = 90) -> httpx.Response:
    """The first /readyz answer of a replica that keeps running (fails on its exit)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(f"{replica.url}/readyz", timeout=5)
        except httpx.TransportError:
            pass
        code = replica.process.poll()
        assert code is None, f"replica exited {code}:\n{replica.output()}"
        assert time.monotonic() < deadline, f"replica never answered:\n{replica.output()}"
        time.sleep(0.1)


def stop(replica: Replica) -> None:
    if replica.process.poll() is None:
        stop_process(replica.process, timeout=30)
    replica.log.close()


@contextmanager
def replicas(
    root: Path, env: dict[str, str], count: int = REPLICAS, args: tuple[str, ...] = ()
) -> Iterator[list[Replica]]:
    """``count`` replicas (``serve`` with ``args``) started at the same instant (each with
    its own data directory, as on separate hosts), all ready; stopped at the end."""
    with ExitStack() as stack:
        started = []
        for index in range(count):
            replica = start_replica(root / f"replica{index}", env, *args)
            stack.callback(stop, replica)
            started.append(replica)
        for replica in started:
            answer = wait_ready(replica)
            assert answer.status_code == 200, (answer.text, replica.output())
        yield started


def admin_token(started: list[Replica]) -> str:
    """The bootstrap admin's token: exactly one replica made it."""
    found = [r.data_dir / "admin-token" for r in started if (r.data_dir / "admin-token").exists()]
    assert len(found) == 1, [r.output() for r in started]
    return found[0].read_text().strip()


def on(replica: Replica, url: str) -> str:
    """``url`` (minted by some replica) pointed at ``replica`` instead, as a load balancer
    in front of them all would send it anywhere."""
    path = url.split("/", 3)[3]
    return f"{replica.url}/{path}"


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def test_replicas_start_together_on_an_empty_database_and_serve_each_others_urls(
    postgres: str, s3: MotoServer, tmp_path: Path
) -> None:
    for round_number in range(ROUNDS):
        root = tmp_path / f"round{round_number}"
        root.mkdir()
        bucket = s3.new_bucket()
        env = replica_env(
            TRACESTORE_DATABASE_URL=fresh_database(postgres),
            TRACESTORE_BLOB_URL=f"s3://{bucket}/ts",
            TRACESTORE_S3_ENDPOINT_URL=s3.endpoint_url,
            **AWS_ENV,
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


# --- the signing key, shared through the database ---


def test_a_url_signed_by_one_process_verifies_in_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    database = Database(url)
    database.migrate()
    one = Settings(data_dir=tmp_path / "one", database_url=url)
    two = Settings(data_dir=tmp_path / "two", database_url=url)
    signer_one, signer_two = url_signer(one, database), url_signer(two, Database(url))
    path = signer_one.archive_path("ts_a", 4_000_000_000)
    signature = path.rsplit("signature=", 1)[1]
    signer_two.verify_archive("ts_a", 4_000_000_000, signature, _now())


def test_an_existing_data_directory_key_is_adopted_so_its_urls_stay_good(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "signing-key").write_text("the-old-key\n")
    url = f"sqlite:///{tmp_path / 'data' / 'tracestore.db'}"
    database = Database(url)
    database.migrate()
    signer = url_signer(Settings(data_dir=tmp_path / "data"), database)
    old = UrlSigner(b"the-old-key").archive_path("ts_a", 4_000_000_000)
    signer.verify_archive("ts_a", 4_000_000_000, old.rsplit("signature=", 1)[1], _now())


def test_rotation_keeps_the_previous_key_for_the_url_lifetime(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'keys.db'}")
    database.migrate()
    lifetime = timedelta(hours=1)
    now = _now()
    first = signing_keys(database, now, lifetime)
    assert len(first) == 1
    rotate_signing_key(database, now, lifetime)
    keys = signing_keys(database, now + timedelta(minutes=59), lifetime)
    assert keys[1:] == first and keys[0] != first[0]
    assert signing_keys(database, now + timedelta(minutes=61), lifetime) == keys[:1]

    # A process that read the keys before the rotation verifies the new key's URLs (it
    # rereads on a mismatch), and its own old URLs still verify after rereading.
    stale = UrlSigner(first[0], reload=lambda: signing_keys(database, now, lifetime))
    new = UrlSigner(keys[0]).archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    old = stale.archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    time.sleep(1.1)  # a mismatch rereads at most once a second
    stale.verify_archive("ts_a", 4_000_000_000, new, now)
    stale.verify_archive("ts_a", 4_000_000_000, old, now)


def _now() -> datetime:
    return datetime.now(UTC)


# --- migrate, and admin commands that do not make a store by accident ---


def _newest_revision() -> str:
    versions = Path(migrations.__file__).parent / "versions"
    return max(p.name.split("_", 1)[0] for p in versions.glob("[0-9]*_*.py"))


def test_migrate_is_a_separate_idempotent_step(tmp_path: Path) -> None:
    newest = _newest_revision()
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(main, ["migrate", "--data-dir", str(tmp_path / "data")])
        assert result.exit_code == 0, result.output
        assert f"is at schema revision {newest}" in result.output
    assert schema_exists(f"sqlite:///{tmp_path / 'data' / 'tracestore.db'}")


def test_an_admin_command_pointed_at_no_store_refuses_and_creates_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["token", "list", "--data-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"No tracestore store at sqlite:///{(tmp_path / 'nowhere').resolve()}" in line
    assert "--init" in line
    assert not (tmp_path / "nowhere").exists()


def test_init_creates_the_store_and_then_the_commands_use_it(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    assert runner.invoke(main, ["tenant", "list", *data, "--init"]).exit_code == 0
    listed = runner.invoke(main, ["tenant", "list", *data])
    assert listed.exit_code == 0 and "default" in listed.output


def test_an_admin_command_names_a_postgres_database_without_a_store(
    postgres: str, tmp_path: Path
) -> None:
    url = fresh_database(postgres)
    env = {"TRACESTORE_DATABASE_URL": url}
    result = CliRunner().invoke(main, ["user", "list", "--data-dir", str(tmp_path)], env=env)
    assert result.exit_code == 1
    assert f"No tracestore store at {url} (from TRACESTORE_DATABASE_URL)" in result.output
    assert not schema_exists(url)


# --- refusing to start, with one line that names what to fix ---


def refusal(tmp_path: Path, env: dict[str, str], command: str = "serve") -> str:
    """The one line a `tracestore serve` (or ``command``) that must not start exits with."""
    words = ["serve", "--port", str(free_port())] if command == "serve" else [command]
    done = subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *words, "--data-dir", str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("Warning:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def s3_env(s3: MotoServer, bucket: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return replica_env(
        TRACESTORE_BLOB_URL=f"s3://{bucket}/ts",
        TRACESTORE_S3_ENDPOINT_URL=s3.endpoint_url,
        # Nothing else on this machine may lend boto3 credentials.
        HOME=str(tmp_path),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
        **extra,
    )


def test_serve_without_s3_credentials_refuses_to_start(s3: MotoServer, tmp_path: Path) -> None:
    line = refusal(tmp_path, s3_env(s3, s3.new_bucket(), tmp_path))
    assert line.startswith("Error: Cannot start: blob store: no S3 credentials for s3://")
    assert "AWS_ACCESS_KEY_ID" in line


def test_serve_with_a_missing_bucket_refuses_to_start(s3: MotoServer, tmp_path: Path) -> None:
    credentials = {k: v for k, v in AWS_ENV.items() if "KEY" in k or "TOKEN" in k}
    line = refusal(tmp_path, s3_env(s3, "no-such-bucket", tmp_path, **credentials))
    assert "the bucket 'no-such-bucket' does not exist" in line
    assert "TRACESTORE_BLOB_URL" in line


def test_serve_with_an_unreachable_s3_endpoint_refuses_to_start(tmp_path: Path) -> None:
    env = replica_env(
        TRACESTORE_BLOB_URL="s3://bucket/ts",
        TRACESTORE_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
        **AWS_ENV,
    )
    line = refusal(tmp_path, env)
    assert "cannot reach the S3 store at http://127.0.0.1:" in line
    assert "TRACESTORE_S3_ENDPOINT_URL" in line


def test_serve_with_an_unreachable_database_refuses_to_start(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://tracestore:secret@127.0.0.1:{free_port()}/traces"
    line = refusal(tmp_path, replica_env(TRACESTORE_DATABASE_URL=url))
    assert line.startswith(
        "Error: Cannot use the database postgresql+psycopg://tracestore:***@127.0.0.1:"
    )
    assert "(TRACESTORE_DATABASE_URL)" in line and "secret" not in line


def test_readyz_names_the_failing_dependency_and_why(
    postgres: str, s3: MotoServer, tmp_path: Path
) -> None:
    bucket = s3.new_bucket()
    env = replica_env(
        TRACESTORE_DATABASE_URL=fresh_database(postgres),
        TRACESTORE_BLOB_URL=f"s3://{bucket}/ts",
        TRACESTORE_S3_ENDPOINT_URL=s3.endpoint_url,
        **AWS_ENV,
    )
    with replicas(tmp_path, env, count=1) as (replica,):
        s3.client().delete_bucket(Bucket=bucket)
        answer = httpx.get(f"{replica.url}/readyz", timeout=30)
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert message == (
        f"Not ready: blob store: the bucket {bucket!r} does not exist at {s3.endpoint_url}: "
        "create it, or name an existing one in TRACESTORE_BLOB_URL"
    )


# --- docs/deploy.md's example, in miniature ---

DEPLOY_DOC = Path(__file__).parent.parent / "docs" / "deploy.md"


def example_block(name: str) -> str:
    """The ```sh block after ``<!-- example: NAME -->`` in docs/deploy.md."""
    text = DEPLOY_DOC.read_text()
    after = text.split(f"<!-- example: {name} -->\n```sh\n", 1)[1]
    return after.split("\n```", 1)[0]


def test_the_deploy_example_runs_in_miniature(
    postgres: str, s3: MotoServer, tmp_path: Path
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
    assert f"is at schema revision {_newest_revision()}" in setup.stdout
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


def test_a_signer_keeps_its_keys_when_the_database_is_away(tmp_path: Path) -> None:
    def away() -> list[bytes]:
        raise OSError("database away")

    signer = UrlSigner(b"key", reload=away)
    signature = signer.archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    time.sleep(1.1)
    with pytest.raises(Forbidden):
        signer.verify_archive("ts_a", 4_000_000_000, "forged", _now())
    signer.verify_archive("ts_a", 4_000_000_000, signature, _now())
