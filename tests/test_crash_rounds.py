"""Crash rounds (issue 15): a real `tracestore serve`, 20 concurrent uploads per round (10
`tracestore upload` processes, 10 uploads through the Python ``Client``), SIGKILLed at a
random moment (uploads starting, parts in flight, completions, the one-second sweeper),
restarted on the same port, and the invariants checked after every round:

- every upload that answered a traceset has a ready traceset, downloaded byte-exact; half
  the uploads keep the default retry budget and must ride out the restart on their own;
- every upload cut off after its session existed resumes (`tracestore upload --resume`, or
  ``upload_traceset(resume_upload_id=...)``) to a ready, byte-exact traceset; one cut off
  before its session failed cleanly (no traceback) and left no ready traceset;
- nothing stored in earlier rounds is lost: every earlier traceset is still ready with the
  same file hashes;
- after `tracestore gc` past the purge grace: no referenced blob is missing, no blob is on
  disk that no ready traceset references, and no finished upload left staging.

At the end, a sweep a day later (past the session lifetime and the orphan-staging grace)
leaves no staging at all and no orphan blob, and every stored blob still hashes to its name.

Fixed seeds; three rounds in CI (TRACESTORE_CRASH_ROUNDS for more). The figures go to
stdout (`pytest -s`), and docs/testing.md quotes them."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support import crafted
from tests.support.ports import free_port
from tests.support.served import MIB, Served, make_traces, serving
from tracestore.client import Client, RetryPolicy
from tracestore.errors import TracestoreError, UploadIncomplete
from tracestore.server.db.database import utcnow
from tracestore.server.lifecycle import ORPHAN_GRACE, sweep
from tracestore.server.services import build_services
from tracestore.server.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.engine_independent]

ROUNDS = int(os.environ.get("TRACESTORE_CRASH_ROUNDS", "3"))
UPLOADS_PER_ROUND = 20  # even ones through the CLI, odd ones through the Client
SERVE_ENV = {"TRACESTORE_SWEEP_INTERVAL": "PT1S", "TRACESTORE_PURGE_GRACE": "PT1S"}
SHORT_RETRY = 0.5  # seconds: an impatient upload gives up during the restart


@dataclass
class Upload:
    number: int
    files: dict[str, bytes]
    directory: Path
    metadata: dict[str, object]
    through_cli: bool
    patient: bool  # keeps the default retry budget, which rides out a restart
    process: subprocess.Popen[str] | None = None
    future: Future[str] | None = None
    upload_id: str | None = None  # the session, once the Client heard of it
    stdout: str = ""
    stderr: str = ""

    @property
    def name(self) -> str:
        return f"crash-{self.number}"


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    at_kill: Counter[str] = field(default_factory=Counter)
    bytes_verified: int = 0


def _cli(served: Served, *args: str, retry: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *args],
        env={**served.env, "TRACESTORE_RETRY_SECONDS": str(retry)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _client(served: Served, patience: float = RetryPolicy.patience) -> Client:
    return Client(served.url, served.token, retry=RetryPolicy(patience=patience))


def _start_cli(served: Served, upload: Upload, meta: Path) -> None:
    retry = RetryPolicy.patience if upload.patient else SHORT_RETRY
    upload.process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tracestore.cli", "upload", str(upload.directory)),
            *("--name", upload.name, "--workload-metadata", str(meta)),
            *("--concurrency", "2", "--json"),
        ],
        env={**served.env, "TRACESTORE_RETRY_SECONDS": str(retry)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _upload_through_client(served: Served, upload: Upload, delay: float) -> str:
    time.sleep(delay)

    def started(session: object) -> None:
        upload.upload_id = getattr(session, "upload_id", None)

    with _client(served, RetryPolicy.patience if upload.patient else SHORT_RETRY) as client:
        traceset = client.upload_traceset(
            upload.directory,
            name=upload.name,
            workload_metadata=upload.metadata,
            concurrency=2,
            on_started=started,
        )
    return traceset.id


def _hostile_files() -> dict[str, bytes]:
    """Issue 41's crafted traces, small: a bzip2 ZIP bomb, a zstd bomb, an archive of many
    members, an event time past a double, a rank past 64 bits, lone surrogates in a trace's
    strings and in a member's name."""
    return {
        "bomb.zip": crafted.zip_bomb("bzip2", 64 * MIB),
        "rank9.json.zst": crafted.stream_bomb("zstd", 64 * MIB),
        "many.tar.gz": crafted.many_members_tar_gz(2_000),
        "far.json": crafted.nonfinite_kineto(),
        "huge.json": crafted.huge_rank_kineto(),
        "lone.json": crafted.surrogate_kineto(),
        "lone.tar": crafted.surrogate_member_tar(),
    }


def _new_uploads(tmp_path: Path, rng: random.Random, first: int) -> list[Upload]:
    uploads = []
    for number in range(first, first + UPLOADS_PER_ROUND):
        sizes = [rng.randrange(1, 3 * MIB) for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.2:  # a file of several 5 MiB parts: resumes mid-file
            sizes.append(rng.randrange(5 * MIB, 12 * MIB))
        directory = tmp_path / f"traces-{number}"
        files = make_traces(directory, sizes)
        if number == first:  # each round, one upload carries the hostile traces too
            for name, data in _hostile_files().items():
                (directory / name).write_bytes(data)
                files[name] = data
        uploads.append(
            Upload(
                number=number,
                files=files,
                directory=directory,
                metadata={"shape": {"rankCount": len(sizes)}, "precision": "bf16"},
                through_cli=number % 2 == 0,
                patient=rng.random() < 0.5,
            )
        )
    return uploads


def _db(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / "tracestore.db", timeout=30)


def _session_count(data_dir: Path, state: str | None = None) -> int:
    query = "SELECT count(*) FROM upload_sessions" + (" WHERE state = ?" if state else "")
    with _db(data_dir) as db:
        return int(db.execute(query, (state,) if state else ()).fetchone()[0])


def _wait_for_sessions(
    data_dir: Path, count: int, state: str | None = None, limit: float = 60.0
) -> None:
    deadline = time.monotonic() + limit
    while _session_count(data_dir, state) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _moment(data_dir: Path, uploads: list[Upload]) -> Counter[str]:
    """Where each upload of the round stood when the service died."""
    names = {u.name for u in uploads}
    with _db(data_dir) as db:
        rows = db.execute(
            "SELECT t.name, s.state FROM tracesets t JOIN upload_sessions s ON s.traceset_id = t.id"
        ).fetchall()
    states = {name: state for name, state in rows if name in names}
    return Counter(states.get(u.name, "no session yet") for u in uploads)


def _resume_id(stderr: str) -> str | None:
    """The upload id of the resume hint the CLI printed, if it got as far as a session."""
    found = re.search(r"--resume (upload_[A-Za-z0-9]+)", stderr)
    return found.group(1) if found else None


def _ready_named(data_dir: Path, name: str) -> int:
    with _db(data_dir) as db:
        query = "SELECT count(*) FROM tracesets WHERE name = ? AND status = 'ready'"
        return int(db.execute(query, (name,)).fetchone()[0])


def _settle(served: Served, data_dir: Path, upload: Upload) -> tuple[str | None, str]:
    """(traceset id or None, what became of it) for one upload after the restart, resuming
    it if it was cut off after its session existed."""
    upload_id: str | None
    if upload.through_cli:
        assert upload.process is not None
        upload.stdout, upload.stderr = upload.process.communicate(timeout=300)
        assert "Traceback" not in upload.stderr, upload.stderr
        if upload.process.returncode == 0:
            return json.loads(upload.stdout)["id"], "answered"
        upload_id = _resume_id(upload.stderr)
    else:
        assert upload.future is not None
        try:
            return upload.future.result(timeout=300), "answered"
        except UploadIncomplete as exc:
            upload_id = exc.upload_id
        except TracestoreError:  # no session: the upload-url request was cut off
            upload_id = upload.upload_id
    if upload_id is None:
        assert _ready_named(data_dir, upload.name) == 0, "a failed upload left a ready traceset"
        return None, "cut off before its session"
    if upload.through_cli:
        resumed = _cli(served, "upload", "--resume", upload_id, str(upload.directory), "--json")
        assert "Traceback" not in resumed.stderr, resumed.stderr
        assert resumed.returncode == 0, resumed.stderr
        return json.loads(resumed.stdout)["id"], "resumed"
    with _client(served) as client:
        return client.upload_traceset(upload.directory, resume_upload_id=upload_id).id, "resumed"


def _assert_byte_exact(client: Client, traceset_id: str, out: Path, upload: Upload) -> int:
    traceset = client.get_traceset(traceset_id)
    assert traceset.status == "ready"
    client.download_traceset(traceset_id, out)
    for name, data in upload.files.items():
        assert (out / name).read_bytes() == data, f"{upload.name}/{name} differs"
    return sum(len(data) for data in upload.files.values())


def _expected_hashes(upload: Upload) -> dict[str, str]:
    return {n: "sha256:" + hashlib.sha256(d).hexdigest() for n, d in upload.files.items()}


def _blob_files(data_dir: Path) -> dict[str, Path]:
    root = data_dir / "blobs" / "blobs"
    return {p.name: p for p in root.rglob("*") if p.is_file()} if root.exists() else {}


def _staging_left(data_dir: Path) -> set[str]:
    staging = data_dir / "blobs" / "staging"
    return {p.name for p in staging.iterdir()} if staging.exists() else set()


def _assert_store_consistent(data_dir: Path) -> set[str]:
    """No referenced blob missing, no unreferenced blob, no finished upload's staging;
    returns the staging left of uploads the database never recorded (orphans in grace)."""
    with _db(data_dir) as db:
        referenced = {
            row[0]
            for row in db.execute(
                "SELECT f.sha256 FROM traceset_files f JOIN tracesets t ON t.id = f.traceset_id"
                " WHERE t.status = 'ready' AND f.sha256 IS NOT NULL"
            )
        }
        states = dict(db.execute("SELECT id, state FROM upload_sessions").fetchall())
    stored = set(_blob_files(data_dir))
    assert referenced <= stored, f"ready tracesets' blobs missing: {sorted(referenced - stored)}"
    assert stored <= referenced, f"orphan blobs after gc: {sorted(stored - referenced)}"
    left = _staging_left(data_dir)
    finished = {upload_id for upload_id in left if states.get(upload_id, "open") != "open"}
    assert not finished, f"staging of finished uploads left: {sorted(finished)}"
    return {upload_id for upload_id in left if upload_id not in states}


def _no_constant(name: str) -> object:
    raise AssertionError(f"{name} in an answer: not JSON")


def _run_round(
    tmp_path: Path,
    data_dir: Path,
    port: int,
    round_number: int,
    stored: dict[str, Upload],
    tally: Tally,
) -> None:
    rng = random.Random(20261201 + round_number)
    uploads = _new_uploads(tmp_path, rng, round_number * UPLOADS_PER_ROUND)
    pool = ThreadPoolExecutor(UPLOADS_PER_ROUND // 2, thread_name_prefix="crash-client")
    with serving(data_dir, env=SERVE_ENV, port=port, measured=False) as served:
        baseline = _session_count(data_dir)
        completed = _session_count(data_dir, "completed")
        for upload in uploads:
            delay = rng.uniform(0.0, 1.0)  # staggered: some are starting when the kill comes
            if upload.through_cli:
                meta = tmp_path / f"meta-{upload.number}.json"
                meta.write_text(json.dumps(upload.metadata))
                _start_cli(served, upload, meta)
            else:
                upload.future = pool.submit(_upload_through_client, served, upload, delay)
        # The moment: once a random number of the uploads have their session (even rounds)
        # or have completed (odd rounds), after a random pause: sessions starting, parts in
        # flight, completions and sweeps all get hit.
        if round_number % 2 == 0:
            _wait_for_sessions(data_dir, baseline + rng.randrange(0, UPLOADS_PER_ROUND + 1))
        else:
            count = rng.randrange(1, UPLOADS_PER_ROUND * 3 // 4)
            _wait_for_sessions(data_dir, completed + count, "completed")
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(served.pid, signal.SIGKILL)
        tally.at_kill.update(_moment(data_dir, uploads))
    # Restarted at once on the same port: the patient uploads are still retrying.
    with (
        serving(data_dir, env=SERVE_ENV, port=port, measured=False) as served,
        _client(served) as client,
    ):
        for upload in uploads:
            traceset_id, outcome = _settle(served, data_dir, upload)
            tally.outcomes[f"{outcome} ({'patient' if upload.patient else 'impatient'})"] += 1
            if traceset_id is None:
                continue
            out = tmp_path / f"out-{upload.number}"
            tally.bytes_verified += _assert_byte_exact(client, traceset_id, out, upload)
            stored[traceset_id] = upload
        for traceset_id, earlier in stored.items():
            traceset = client.get_traceset(traceset_id)
            assert traceset.status == "ready", f"{earlier.name} was lost: {traceset.status}"
            assert {f.name: f.hash for f in traceset.files} == _expected_hashes(earlier)
        with served.api() as api:  # every answer JSON, whatever its traces held
            for traceset_id in stored:
                answer = api.get(f"/api/v1/tracesets/{traceset_id}")
                json.loads(answer.text, parse_constant=_no_constant)
        time.sleep(1.5)  # past the purge grace
        gc = _cli(served, "gc", "--data-dir", str(data_dir), "--json")
        assert gc.returncode == 0, gc.stderr
    pool.shutdown()
    _assert_store_consistent(data_dir)


def test_sigkill_at_random_moments_loses_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    stored: dict[str, Upload] = {}
    tally = Tally()
    started = time.monotonic()
    for round_number in range(ROUNDS):
        _run_round(tmp_path, data_dir, port, round_number, stored, tally)

    # A day later: past the session lifetime and the orphan grace, not the 7-day TTL.
    later = utcnow() + max(timedelta(hours=25), ORPHAN_GRACE * 2)
    services = build_services(
        Settings(data_dir=data_dir, purge_grace=timedelta(seconds=1)), clock=lambda: later
    )
    try:
        sweep(services)
        services.wait_for_background()
    finally:
        services.close()
    assert not _assert_store_consistent(data_dir)
    assert not _staging_left(data_dir), "staging left a day after the rounds"
    blobs = _blob_files(data_dir)
    for sha256, path in blobs.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256, f"blob {sha256} damaged"
    with _db(data_dir) as db:
        ready = {row[0] for row in db.execute("SELECT id FROM tracesets WHERE status = 'ready'")}
    assert ready == set(stored), "a traceset stored in a round is no longer ready"

    answered = sum(n for kind, n in tally.outcomes.items() if kind.startswith("answered"))
    assert (
        answered + sum(n for kind, n in tally.outcomes.items() if not kind.startswith("answered"))
        == ROUNDS * UPLOADS_PER_ROUND
    )
    print(
        f"crash rounds: {ROUNDS} rounds, {ROUNDS * UPLOADS_PER_ROUND} uploads in"
        f" {time.monotonic() - started:.0f} s; at the kills: {dict(tally.at_kill)};"
        f" outcomes: {dict(tally.outcomes)}; {tally.bytes_verified / MIB:.0f} MiB downloaded"
        f" byte-exact; {len(blobs)} blobs re-hashed"
    )
