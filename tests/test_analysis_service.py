"""The analysis inside the service (issue 44, item 2): durable jobs per Kineto file and one
that assembles the summary, the stored answer of GET /api/v1/tracesets/{id}/analysis (its
statuses, ?ranks=, visibility), a file that fails alone, and the bytes read once. On the
test database: SQLite, or PostgreSQL in the PostgreSQL pass."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.kineto_traces import TraceBuilder, dlrm_ranks, pytorch_json
from tests.support.paths import TESTDATA
from tests.support.tenancy import person
from tests.support.uploading import upload
from tracestore import schemas
from tracestore.analysis import analyze_path, traceset_json
from tracestore.analysis.model import KERNEL_ROWS
from tracestore.analysis.summary import ARCHIVED
from tracestore.server import analysis, db, inspection, jobs
from tracestore.server.analysis_answer import answer_text
from tracestore.server.services import Services

KINETO = TESTDATA / "kineto-dlrm-8ranks"
EIGHT = {"shape": {"rankCount": 8}}


def _analysis(http: TestClient, traceset_id: str, **params: str) -> dict[str, Any]:
    answer = http.get(f"/api/v1/tracesets/{traceset_id}/analysis", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _real_set() -> dict[str, tuple[bytes, str]]:
    return {p.name: (p.read_bytes(), "primary") for p in sorted(KINETO.iterdir())}


def _jobs(services: Services, kind: str) -> list[db.Job]:
    with services.db.session(write=False) as session:
        return list(session.scalars(select(db.Job).where(db.Job.kind == kind)))


def _expected(tmp_path: Path, files: dict[str, tuple[bytes, str]]) -> dict[str, Any]:
    """What `tracestore analyze --json` answers for the same files (analyzedAt aside)."""
    ranks = []
    for name, (data, _) in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        outcome = analyze_path(path, name)
        assert outcome.rank is not None, outcome.reason
        ranks.append(outcome.rank)
    return dict(json.loads(json.dumps(traceset_json(ranks, KERNEL_ROWS))))


def test_each_kineto_file_is_a_job_then_one_assembles_the_summary(
    http: TestClient, services: Services, tmp_path: Path
) -> None:
    files = _real_set()
    traceset = upload(http, files, EIGHT)
    # Inspected by the completing request; the analysis waits for the workers.
    assert traceset["inspection"]["status"] == "complete"
    pending = _analysis(http, traceset["id"])
    assert pending == {
        "status": "pending",
        "reason": None,
        "analyzedAt": None,
        "ranks": [],
        "summary": None,
    }
    assert [j.state for j in _jobs(services, jobs.TRACE_FILE)] == ["queued"] * 8
    assert _jobs(services, jobs.ASSEMBLE) == []

    services.wait_for_background()
    answer = _analysis(http, traceset["id"])
    assert answer["status"] == "complete" and answer["analyzedAt"] is not None
    expected = _expected(tmp_path, files)
    assert {**answer, "analyzedAt": None} == expected  # the API's object, as analyze's
    assert [r["rank"] for r in answer["ranks"]] == list(range(8))
    # Each file's job, and the one assembly, record which worker ran them.
    ran = _jobs(services, jobs.TRACE_FILE) + _jobs(services, jobs.ASSEMBLE)
    assert len(ran) == 9 and {j.state for j in ran} == {"done"}
    assert all(j.ran_by == services.worker.owner for j in ran)  # type: ignore[union-attr]
    # The summary is searchable: its medians are the traceset's columns.
    with services.db.session(write=False) as session:
        row = session.get(db.Traceset, traceset["id"])
        assert row is not None
        assert row.median_idle_pct == answer["summary"]["idlePct"]["median"]
        assert row.median_overlap_pct == answer["summary"]["overlapPct"]["median"]
        assert row.median_step_time_us == answer["summary"]["stepTimeUs"]["median"]


def test_the_stored_text_is_the_models_answer(http: TestClient, services: Services) -> None:
    traceset = upload(http, _real_set(), EIGHT)
    services.wait_for_background()
    text = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").text
    model = schemas.TracesetAnalysis.model_validate_json(text)
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == json.loads(text)
    assert model.ranks[3].kernels is not None and model.summary is not None


def test_a_large_set_reads_each_file_once_for_its_inspection_and_analysis(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)
    opened: list[str] = []
    open_blob = services.store.open_blob

    def counted(sha256: str) -> Any:
        opened.append(sha256)
        return open_blob(sha256)

    monkeypatch.setattr(services.store, "open_blob", counted)
    files = _real_set()
    traceset = upload(http, files, EIGHT)
    assert {f["metadataStatus"] for f in traceset["files"]} == {"pending"}
    assert traceset["inspection"] is None
    assert len(_jobs(services, jobs.TRACE_FILE)) == 8  # a job per file: every worker's share
    services.wait_for_background()
    after = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    # The census from the files' inspections, recorded by the assembly.
    assert after["inspection"]["status"] == "complete"
    assert after["inspection"]["census"]["ranksFound"] == list(range(8))
    assert {f["metadataStatus"] for f in after["files"]} == {"complete"}
    assert [f["rankRange"] for f in after["files"]] == [{"start": r, "end": r} for r in range(8)]
    answer = _analysis(http, traceset["id"])
    assert {**answer, "analyzedAt": None} == _expected(tmp_path, files)
    # Each stored file was opened once, for both.
    hashes = [f["hash"].removeprefix("sha256:") for f in after["files"]]
    assert sorted(opened) == sorted(hashes)


def test_ranks_selects_entries_and_a_bad_list_is_named(
    http: TestClient, services: Services
) -> None:
    traceset = upload(http, _real_set(), EIGHT)
    services.wait_for_background()
    whole = _analysis(http, traceset["id"])
    some = _analysis(http, traceset["id"], ranks="2-3,6")
    assert [r["rank"] for r in some["ranks"]] == [2, 3, 6]
    assert some["ranks"] == [whole["ranks"][r] for r in (2, 3, 6)]
    assert some["summary"] == whole["summary"]  # the traceset's, whatever is selected
    assert _analysis(http, traceset["id"], ranks="100-200")["ranks"] == []
    for bad, words in (("x", "'x' is not a rank"), ("7-2", "ends before it starts"), ("", "")):
        answer = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis", params={"ranks": bad})
        assert words in assert_error(answer, 400, "VALIDATION_ERROR")["message"]


def test_visibility_is_the_tracesets(http: TestClient, services: Services) -> None:
    traceset = upload(http, _real_set(), EIGHT)
    services.wait_for_background()
    outsider = person(services, "outsider", "elsewhere", ["theirs"])
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis", headers=outsider.auth)
    assert (
        assert_error(answer, 404, "NOT_FOUND")["message"]
        == f"Traceset '{traceset['id']}' not found"
    )
    assert http.get("/api/v1/tracesets/ts_nope/analysis").status_code == 404
    unauthenticated = http.get(
        f"/api/v1/tracesets/{traceset['id']}/analysis?ranks=x", headers={"Authorization": ""}
    )
    assert unauthenticated.status_code == 401  # the token before the parameters


def test_a_set_without_kineto_traces_answers_none(http: TestClient, services: Services) -> None:
    chakra = TESTDATA / "chakra-allreduce-4ranks"
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(chakra.iterdir())}
    traceset = upload(http, files, {"shape": {"rankCount": 4}})
    answer = _analysis(http, traceset["id"])  # known at the inspection: no job to wait for
    assert answer["status"] == "none"
    assert answer["reason"] == "the traceset holds no Kineto trace"
    assert answer["ranks"] == [] and answer["summary"] is None
    assert _jobs(services, jobs.TRACE_FILE) == []


@pytest.fixture(params=["inspected-first", "one-pass"])
def either_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small set (inspected by the completion, then a job a Kineto file reads it again),
    or a large one (a job a file inspects and analyses it in one pass)."""
    if request.param == "one-pass":
        monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)


@pytest.mark.usefixtures("either_path")
def test_kineto_traces_only_inside_an_archive_are_named_not_called_absent(
    http: TestClient, services: Services
) -> None:
    # "holds no Kineto trace" was untrue of a tar.gz of ranks: the answer says where they
    # are and how to have them analysed.
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        for rank in range(2):
            member = tarfile.TarInfo(f"rank{rank}.json")
            body = _kineto(rank, 2)
            member.size = len(body)
            tar.addfile(member, io.BytesIO(body))
    traceset = upload(
        http, {"ranks.tar.gz": (packed.getvalue(), "primary")}, {"shape": {"rankCount": 2}}
    )
    services.wait_for_background()
    answer = _analysis(http, traceset["id"])
    assert (answer["status"], answer["reason"]) == ("none", ARCHIVED)
    assert answer["ranks"] == [] and answer["summary"] is None


def test_an_upload_not_complete_is_pending_and_one_stored_before_is_none(
    http: TestClient, services: Services
) -> None:
    body = {
        "name": "x",
        "files": [{"name": "a.json", "size": 5, "role": "primary"}],
        "workloadMetadata": {"shape": {"rankCount": 1}},
    }
    started = http.post("/api/v1/tracesets/upload-url", json=body).json()
    answer = _analysis(http, started["tracesetId"])
    assert (answer["status"], answer["reason"]) == (
        "pending",
        "the upload is not complete: the analysis runs once it is",
    )
    traceset = upload(http, _real_set(), EIGHT)
    with services.db.session() as session:  # as a traceset stored before migration 0009
        session.delete(session.get(db.TracesetAnalysis, traceset["id"]))
    answer = _analysis(http, traceset["id"])
    assert (answer["status"], answer["reason"]) == (
        "none",
        "the traceset was stored before this service analysed traces",
    )


def _kineto(rank: int, world: int, extra: bytes = b"") -> bytes:
    trace = TraceBuilder(rank, world=world)
    trace.step(1, 0, 100)
    trace.step(2, 100, 100)
    trace.device("gemm", 10, 50)
    trace.device("ncclDevKernel_AllReduce", 60, 30)
    trace.device("gemm", 110, 50)
    return pytorch_json(trace.trace()).encode() + extra


@pytest.mark.usefixtures("either_path")
def test_a_file_that_cannot_be_analysed_fails_alone_with_its_reason(
    http: TestClient, services: Services
) -> None:
    # 10^17 µs: within what inspection holds (2^63 µs), past the analysis's 2^62 ns.
    beyond = _kineto(2, 4).replace(b'"ts": 110', b'"ts": 100000000000000000', 1)
    assert beyond != _kineto(2, 4)
    files = {
        "r0.json": (_kineto(0, 4), "primary"),
        "r1.json": (_kineto(1, 4)[:-40], "primary"),  # truncated: its inspection fails too
        "r2.json": (beyond, "primary"),  # inspection reads it; the analysis cannot
        "r3.json": (_kineto(3, 4), "primary"),
        "notes.txt": (b"not a trace\n", "primary"),
    }
    traceset = upload(http, files, {"shape": {"rankCount": 4}})
    services.wait_for_background()
    answer = _analysis(http, traceset["id"])
    assert answer["status"] == "complete"
    entries = {e["file"]: e for e in answer["ranks"]}
    assert set(entries) == {"r0.json", "r1.json", "r2.json", "r3.json"}  # not the notes
    assert entries["r1.json"]["status"] == "failed"
    assert entries["r1.json"]["reason"].startswith("not analysed: its inspection failed: ")
    assert entries["r2.json"] == {
        "rank": 2,
        "file": "r2.json",
        "status": "failed",
        "reason": "a time of 100000000000000000 µs is beyond what the analysis holds (about "
        "146 years either way)",
    }
    assert entries["r0.json"]["status"] == entries["r3.json"]["status"] == "complete"
    assert answer["summary"]["rankCount"] == 2


def _held_by(services: Services, owner: str, subject: str) -> None:
    """``subject``'s job claimed by ``owner`` (the other jobs claimed on the way, handed back)."""
    lease = services.settings.job_lease
    others = []
    while True:
        job = jobs.claim(services.db, owner, services.now(), lease, [jobs.TRACE_FILE])
        assert job is not None, f"no job of {subject} to claim"
        if job.subject == subject:
            break
        others.append(job)
    for job in others:
        assert jobs.release(services.db, job, services.now())


def test_a_file_whose_workers_die_is_given_up_and_the_rest_answers(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = {"r0.json": (_kineto(0, 2), "primary"), "r1.json": (_kineto(1, 2), "primary")}
    traceset = upload(http, files, {"shape": {"rankCount": 2}})
    for attempt in range(services.settings.job_crashes):  # r0's readers die, one by one
        _held_by(services, f"doomed{attempt}", analysis.file_subject(traceset["id"], 0))
        clock.advance(seconds=services.settings.job_lease.total_seconds() + 1)
    services.wait_for_background()
    answer = _analysis(http, traceset["id"])
    assert answer["status"] == "complete"
    failed, good = answer["ranks"]
    assert (failed["rank"], failed["status"]) == (0, "failed")
    assert failed["reason"].startswith(
        "analysis was given up: its worker died while running it 2 times"
    )
    assert (good["rank"], good["status"]) == (1, "complete")
    assert answer["summary"]["rankCount"] == 1


def test_a_rank_past_its_share_of_the_stored_analysis_is_shortened_saying_so(
    http: TestClient, services: Services
) -> None:
    services.settings = services.settings.model_copy(update={"max_analysis_size": 64 * 1024})
    trace = TraceBuilder(0, world=1)
    for step in range(2000):  # each step a row of the rank's JSON: ~200 KB of them
        trace.step(step, step * 10, 10)
        trace.device("gemm", step * 10 + 1, 5)
    files = {"r0.json": (pytorch_json(trace.trace()).encode(), "primary")}
    traceset = upload(http, files, {"shape": {"rankCount": 1}})
    services.wait_for_background()
    text = http.get(f"/api/v1/tracesets/{traceset['id']}/analysis").text
    (entry,) = json.loads(text)["ranks"]
    assert entry["truncated"]["limit"] == 64 * 1024
    assert "TRACESTORE_MAX_ANALYSIS_SIZE" in entry["truncated"]["message"]
    assert len(entry["steps"]) < 2000 and entry["temporal"]["kernelTimeUs"] > 0
    assert len(json.dumps(entry)) < 70 * 1024


def test_issue_45s_detail_is_kept_beside_each_rank(http: TestClient, services: Services) -> None:
    traceset = upload(http, _real_set(), EIGHT)
    services.wait_for_background()
    with services.db.session(write=False) as session:
        row = session.get(db.FileAnalysis, (traceset["id"], 0))
        assert row is not None
        detail = analysis.stored_detail(row.detail)
    assert detail is not None
    kept = analyze_path(sorted(KINETO.iterdir())[0]).rank
    assert kept is not None
    assert detail == json.loads("".join(kept.analysis.detail_text()))
    assert len(detail["collectives"]["startNs"]) == len(kept.analysis.collectives) > 0


def test_answer_text_writes_the_models_members_in_order() -> None:
    text = answer_text(
        "complete",
        None,
        "2026-01-01T00:00:00.000Z",
        [(0, "a", "complete", None, '{"temporal":{}}'), (None, "b", "failed", "why", None)],
        '{"rankCount":1}',
    )
    assert json.loads(text) == {
        "status": "complete",
        "reason": None,
        "analyzedAt": "2026-01-01T00:00:00.000Z",
        "ranks": [
            {"rank": 0, "file": "a", "status": "complete", "reason": None, "temporal": {}},
            {"rank": None, "file": "b", "status": "failed", "reason": "why"},
        ],
        "summary": {"rankCount": 1},
    }
    assert list(json.loads(text)) == [
        field.alias for field in schemas.TracesetAnalysis.model_fields.values()
    ]


@pytest.mark.slow
def test_a_64_rank_set_from_the_real_sample(http: TestClient, services: Services) -> None:
    files = {name: (data, "primary") for name, data in dlrm_ranks(64).items()}
    traceset = upload(http, files, {"shape": {"rankCount": 64}})
    services.wait_for_background()
    answer = _analysis(http, traceset["id"])
    assert answer["status"] == "complete"
    assert [r["rank"] for r in answer["ranks"]] == list(range(64))
    assert answer["summary"]["rankCount"] == 64
    assert len(_jobs(services, jobs.TRACE_FILE)) == 64
