"""Background jobs through real processes: API-only replicas (`serve --no-worker`) on
PostgreSQL and S3 keep answering while a `tracestore worker` reads a large traceset's file
(its inspection and analysis, one `trace_file` job); that worker is SIGKILLed mid-read, and
a second one finishes the job once the lease lapses, then assembles the census."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import crafted
from tests.support.ports import free_port
from tests.support.replica_processes import (  # noqa: F401 - the postgres and s3 fixtures
    admin_token,
    bucket_replica_env,
    fresh_database,
    postgres,
    refusal,
    replica_env,
    replicas,
    s3,
    worker_process,
)
from tests.support.s3server import MotoServer
from tests.support.served import serving
from tests.support.waiting import wait_until
from tracestore.client import Client

pytestmark = pytest.mark.slow  # replicas and workers as processes, on PostgreSQL and S3

LEASE_SECONDS = 2
MIB = crafted.MIB
# Over the 64 MiB inspected before completion answers: its inspection is a queued job,
# which takes a worker seconds (a Kineto trace of ~1M collective events).
EVENTS = 950_000


def big_kineto(path: Path) -> None:
    event = (
        '{"ph": "X", "name": "record_param_comms", "ts": %d, "dur": 5, '
        '"args": {"Collective name": "allreduce"}}'
    )
    with path.open("w") as handle:
        handle.write('{"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, ')
        handle.write('"traceEvents": [')
        handle.write(",".join(event % i for i in range(EVENTS)))
        handle.write("]}")


def job_row(database_url: str) -> dict[str, Any] | None:
    """The file's job, straight from the jobs table."""
    with psycopg.connect(database_url.replace("+psycopg", "")) as connection:
        row = connection.execute(
            "SELECT state, lease_owner, attempts, lease_until FROM jobs WHERE kind = 'trace_file'"
        ).fetchone()
    if row is None:
        return None
    return dict(zip(("state", "lease_owner", "attempts", "lease_until"), row, strict=True))


def wait_for(predicate: Any, what: str, timeout: float, logs: list[Path]) -> Any:
    """``wait_until``, failing with the processes' logs."""
    return wait_until(
        predicate, lambda: f"{what}:\n" + "\n".join(p.read_text() for p in logs), timeout
    )


class Watcher:
    """Asks each API replica for /readyz and the traceset, over and over, from a thread:
    every answer must come, 200, with the files pending until inspection is done."""

    def __init__(self, urls: list[str], token: str, traceset_id: str) -> None:
        self.urls, self.token, self.traceset_id = urls, token, traceset_id
        self.answers: list[tuple[str, int, str]] = []  # (url, status, metadataStatus)
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _watch(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(timeout=30) as http:  # answers asked of, not their speed
            while not self._stop.is_set():
                for url in self.urls:
                    try:
                        ready = http.get(f"{url}/readyz")
                        got = http.get(
                            f"{url}/api/v1/tracesets/{self.traceset_id}", headers=headers
                        )
                    except httpx.HTTPError as exc:
                        self.problems.append(f"{url}: {exc!r}")
                        continue
                    if ready.status_code != 200 or got.status_code != 200:
                        self.problems.append(f"{url}: {ready.status_code} {got.status_code}")
                        continue
                    self.answers.append((url, 200, got.json()["files"][0]["metadataStatus"]))
                time.sleep(0.1)


def test_a_killed_workers_inspection_is_finished_by_another_while_the_api_answers(
    postgres: str,  # noqa: F811
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    database_url = fresh_database(postgres)
    env = bucket_replica_env(
        database_url,
        s3,
        s3.new_bucket(),
        TRACESTORE_JOB_LEASE=str(LEASE_SECONDS),
    )
    source = tmp_path / "traces"
    source.mkdir()
    big_kineto(source / "rank0.json")
    assert (source / "rank0.json").stat().st_size > 64 * 1024 * 1024

    with ExitStack() as stack:
        api = stack.enter_context(replicas(tmp_path, env, count=2, args=("--no-worker",)))
        token = admin_token(api)
        with Client(api[0].url, token) as client:
            made = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 1}})
        assert [f.metadata_status for f in made.files] == ["pending"]
        logs = [r.data_dir.parent / f"{r.data_dir.name}.log" for r in api]
        # API-only replicas run no jobs: it stays queued.
        time.sleep(1.5)
        queued = job_row(database_url)
        assert queued is not None and queued["state"] == "queued", queued

        watcher = stack.enter_context(Watcher([r.url for r in api], token, made.id))
        first = stack.enter_context(worker_process(tmp_path, "worker1", env))
        logs.append(tmp_path / "worker1.log")
        running = wait_for(
            lambda: (row := job_row(database_url)) and row["state"] == "running" and row,
            "the first worker never claimed the job",
            60,
            logs,
        )
        time.sleep(LEASE_SECONDS)  # it renews its lease while it inspects ...
        assert job_row(database_url)["lease_until"] > running["lease_until"]  # type: ignore[index]
        first.kill()  # ... and dies mid-inspection
        first.wait()
        killed = job_row(database_url)
        assert killed is not None and killed["state"] == "running", killed
        assert killed["lease_owner"] == running["lease_owner"]

        second = stack.enter_context(worker_process(tmp_path, "worker2", env))
        logs.append(tmp_path / "worker2.log")

        def inspected() -> bool:
            with Client(api[1].url, token) as client:
                return client.get_traceset(made.id).inspection is not None  # the census

        wait_for(inspected, "the second worker never finished the job", 90, logs)
        assert second.poll() is None
        done = job_row(database_url)
        assert done is not None and done["state"] == "done" and done["attempts"] == 2, done
        worker2_log = (tmp_path / "worker2.log").read_text()
        assert "attempt 2" in worker2_log, worker2_log

        with Client(api[0].url, token) as client:
            after = client.get_traceset(made.id)
        assert after.files[0].metadata_status == "complete"
        assert after.inspection is not None
        assert after.inspection.status == "complete"
        assert after.inspection.census is not None and after.inspection.census.ranks_found == [0]

    # Both replicas answered throughout, and showed pending until the second worker's end.
    assert watcher.problems == []
    seen = {url: [status for u, _, status in watcher.answers if u == url] for url in watcher.urls}
    for url, statuses in seen.items():
        assert statuses, url
        assert set(statuses) <= {"pending", "complete"}, statuses
        settled = statuses.index("complete") if "complete" in statuses else len(statuses)
        assert set(statuses[settled:]) <= {"complete"}, json.dumps(statuses)


def test_a_worker_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = replica_env()
    with worker_process(tmp_path, "data", env) as process:
        wait_for(
            lambda: "running jobs from" in (tmp_path / "data.log").read_text(),
            "the worker never started",
            60,
            [tmp_path / "data.log"],
        )
        process.terminate()
        assert process.wait(timeout=30) == 0
    output = (tmp_path / "data.log").read_text()
    assert "stopped" in output and "Traceback" not in output, output


def test_a_worker_without_its_database_refuses_to_start_with_one_line(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://tracestore:secret@127.0.0.1:{free_port()}/traces"
    line = refusal(tmp_path, replica_env(TRACESTORE_DATABASE_URL=url), command="worker")
    assert line.startswith("Error: Cannot use the database postgresql+psycopg://tracestore:***@")
    assert "(TRACESTORE_DATABASE_URL)" in line and "secret" not in line


def _job(data_dir: Path) -> dict[str, Any] | None:
    """The inspect job, straight from the SQLite jobs table."""
    with sqlite3.connect(data_dir / "tracestore.db", timeout=30) as connection:
        row = connection.execute(
            "SELECT state, lease_owner, attempts, crashes, error FROM jobs WHERE kind = 'inspect'"
        ).fetchone()
    keys = ("state", "lease_owner", "attempts", "crashes", "error")
    return None if row is None else dict(zip(keys, row, strict=True))


def test_a_job_that_kills_its_processes_is_given_up_after_the_crashes_allowed(
    tmp_path: Path,
) -> None:
    """The issue's bomb killed `serve`, and after each restart the worker took the job up
    again and died again. Here the processes running it are SIGKILLed mid-inspection (a
    zstd trace that unpacks to 4 GiB, the budget lifted so it runs long): the serve that
    inspects it in the completion, then a worker; the next worker gives it up with the
    reason (TRACESTORE_JOB_CRASHES=2), and the traceset shows it failed, not pending."""
    source = tmp_path / "traces"
    source.mkdir()
    (source / "rank0.json.zst").write_bytes(crafted.stream_bomb("zstd", 4096 * MIB))
    data = tmp_path / "data"
    env = {
        "TRACESTORE_JOB_LEASE": str(LEASE_SECONDS),
        "TRACESTORE_INSPECT_MAX_EXPANSION": "1000000000",
    }
    metadata = tmp_path / "meta.json"
    metadata.write_text(json.dumps({"shape": {"rankCount": 1}}))
    logs = [tmp_path / "server.log", tmp_path / "upload.log"]
    with serving(data, "--no-worker", env=env) as served, logs[1].open("wb") as told:
        uploader = subprocess.Popen(
            [
                *(sys.executable, "-m", "tracestore.cli", "upload", str(source)),
                *("--workload-metadata", str(metadata)),
            ],
            env={**served.env, "TRACESTORE_RETRY_SECONDS": "1"},
            stdout=told,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(
                lambda: (row := _job(data)) and row["state"] == "running",
                "the completion never took its inspection",
                120,
                logs,
            )
            os.kill(served.pid, signal.SIGKILL)  # crash 1: the serve inspecting it
        finally:
            uploader.kill()
            uploader.wait()
    worker_env = {**served.env, **env}
    for number in (1, 2):
        with worker_process(tmp_path, f"worker{number}", worker_env, data) as worker:
            logs.append(tmp_path / f"worker{number}.log")
            if number == 1:
                wait_for(
                    lambda: (row := _job(data)) and row["attempts"] == 2,
                    "the first worker never took the job over",
                    60,
                    logs,
                )
                worker.kill()  # crash 2: the worker inspecting it
                worker.wait()
            else:
                given_up = wait_for(
                    lambda: (row := _job(data)) and row["state"] == "failed" and row,
                    "the second worker never gave the job up",
                    60,
                    logs,
                )
    assert given_up["crashes"] == 2 and given_up["attempts"] == 3, given_up
    assert "its worker died while running it 2 times" in given_up["error"]
    assert "Traceback" not in (tmp_path / "worker2.log").read_text()
    with serving(data, "--no-worker") as served, Client(served.url, served.token) as client:
        (traceset,) = list(client.list_tracesets())
        after = client.get_traceset(traceset.id)
    assert after.files[0].metadata_status == "failed"
    assert after.inspection is not None and after.inspection.status == "failed"
    assert "its worker died while running it 2 times" in (after.inspection.reason or "")
