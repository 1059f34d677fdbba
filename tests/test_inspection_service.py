"""Inspection inside the service: after completion every primary file is read, its rank
recorded, and the traceset's rank census answered on GET."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tracestore.server import inspection
from tracestore.server.services import Services

KINETO = TESTDATA / "kineto-dlrm-8ranks"
CHAKRA = TESTDATA / "chakra-allreduce-4ranks"


def _files(folder: Path) -> dict[str, tuple[bytes, str]]:
    assert folder.is_dir(), f"{folder} is missing: the real trace samples must be beside the repo"
    return {p.name: (p.read_bytes(), "primary") for p in sorted(folder.iterdir())}


def _kineto(rank: int | None, world: int = 2) -> bytes:
    info = (
        {}
        if rank is None
        else {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}}
    )
    return json.dumps(
        {
            **info,
            "traceEvents": [
                {
                    "ph": "X",
                    "name": "record_param_comms",
                    "ts": 10,
                    "dur": 5,
                    "args": {"Collective name": "allreduce"},
                }
            ],
        }
    ).encode()


def test_the_real_8_rank_kineto_set_is_complete(http: TestClient) -> None:
    traceset = upload(http, _files(KINETO), {"shape": {"rankCount": 8}})
    census = traceset["inspection"]["census"]
    assert census["ranksFound"] == list(range(8))
    assert census["ranksMissing"] == [] and census["duplicatedRanks"] == []
    assert census["checks"]["rankCountMatches"]["passed"] is True
    for entry in traceset["files"]:
        rank = int(entry["name"].removeprefix("worker").split("_")[0])
        assert entry["metadataStatus"] == "complete"
        assert entry["rankRange"] == {"start": rank, "end": rank}
    kinds = {f["format"] for f in traceset["inspection"]["files"]}
    assert kinds == {"kineto_json"}


def test_declared_4_but_8_ranks_found_is_reported_not_refused(http: TestClient) -> None:
    traceset = upload(http, _files(KINETO), {"shape": {"rankCount": 4}})
    assert traceset["status"] == "ready"
    check = traceset["inspection"]["census"]["checks"]["rankCountMatches"]
    assert check["passed"] is False
    assert "4" in check["message"] and "8" in check["message"]


def test_the_real_4_rank_chakra_set_takes_ranks_from_names(http: TestClient) -> None:
    traceset = upload(http, _files(CHAKRA), {"parallelism": {"dp": 4}})
    census = traceset["inspection"]["census"]
    assert census["ranksFound"] == [0, 1, 2, 3]
    assert census["checks"]["parallelismConsistent"]["passed"] is True
    ranges = {f["name"]: f["rankRange"] for f in traceset["files"]}
    assert ranges["all_reduce.2.et"] == {"start": 2, "end": 2}


def test_a_missing_rank_and_an_unranked_file_are_named(http: TestClient) -> None:
    files = {
        "rank0.json": (_kineto(0, 4), "primary"),
        "rank2.json": (_kineto(2, 4), "primary"),
        "rank3.json": (_kineto(3, 4), "primary"),
        "mystery.json": (_kineto(None), "primary"),
        "notes.txt": (b"hello", "supporting"),
    }
    traceset = upload(http, files, {"shape": {"rankCount": 4}})
    census = traceset["inspection"]["census"]
    assert census["ranksMissing"] == [{"start": 1, "end": 1}]
    assert census["unrankedFiles"] == ["mystery.json"]
    assert "1" in census["checks"]["rankCountMatches"]["message"]
    statuses = {f["name"]: (f["metadataStatus"], f["rankRange"]) for f in traceset["files"]}
    assert statuses["mystery.json"] == ("complete", None)
    assert statuses["notes.txt"] == ("complete", None)


def test_a_zip_of_ranks_gets_the_range_of_its_members(http: TestClient) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for rank in range(4):
            archive.writestr(f"traces/rank{rank}.json.gz", gzip.compress(_kineto(rank, 8)))
    second = io.BytesIO()
    with zipfile.ZipFile(second, "w") as archive:
        for rank in range(4, 8):
            archive.writestr(f"rank{rank}.json", _kineto(rank, 8))
    files = {"a.zip": (buffer.getvalue(), "primary"), "b.zip": (second.getvalue(), "primary")}
    traceset = upload(http, files, {"shape": {"rankCount": 8}})
    ranges = {f["name"]: f["rankRange"] for f in traceset["files"]}
    assert ranges == {"a.zip": {"start": 0, "end": 3}, "b.zip": {"start": 4, "end": 7}}
    assert traceset["inspection"]["census"]["checks"]["rankCountMatches"]["passed"] is True


def test_a_truncated_file_fails_its_own_inspection_only(http: TestClient) -> None:
    files = {
        "rank0.json": (_kineto(0, 2)[:-30], "primary"),
        "rank1.json": (_kineto(1, 2), "primary"),
    }
    traceset = upload(http, files, {"shape": {"rankCount": 2}})
    by_name = {f["name"]: f["metadataStatus"] for f in traceset["files"]}
    assert by_name == {"rank0.json": "failed", "rank1.json": "complete"}
    failed = traceset["inspection"]["census"]["failedFiles"]
    assert failed and failed[0]["file"] == "rank0.json" and failed[0]["reason"]
    assert traceset["status"] == "ready"


def test_large_tracesets_are_inspected_in_the_background(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspection, "INLINE_INSPECTION_BYTES", 0)
    traceset = upload(http, {"r0.json": (_kineto(0, 1), "primary")}, {"shape": {"rankCount": 1}})
    assert traceset["files"][0]["metadataStatus"] == "pending"
    services.wait_for_background()  # the worker runs the queued inspection job
    after: dict[str, Any] = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    assert after["files"][0]["metadataStatus"] == "complete"
    assert after["inspection"]["census"]["ranksFound"] == [0]


def test_an_inspection_whose_process_died_is_taken_over_when_its_lease_lapses(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracestore.server import completion

    # The completing request records the job it holds, then "dies" before inspecting.
    monkeypatch.setattr(completion, "run_inspection", lambda *a: None)
    traceset = upload(http, {"r0.json": (_kineto(0, 1), "primary")}, {"shape": {"rankCount": 1}})
    assert traceset["files"][0]["metadataStatus"] == "pending"
    services.wait_for_background()  # the lease is still held: nothing to take over yet
    pending = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    assert pending["files"][0]["metadataStatus"] == "pending"
    services.clock.advance(seconds=services.settings.job_lease.total_seconds() + 1)  # type: ignore[attr-defined]
    services.wait_for_background()
    after = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    assert after["files"][0]["metadataStatus"] == "complete"


def test_validate_reports_the_census_naming_file_and_rank(http: TestClient) -> None:
    files = {"a.json": (_kineto(0, 2), "primary"), "b.json": (_kineto(0, 2), "primary")}
    traceset = upload(http, files, {"parallelism": {"dp": 2}})
    answer = http.post(f"/api/v1/tracesets/{traceset['id']}/validate").json()
    checks = {c["name"]: c for c in answer["checks"]}
    assert checks["file_integrity"]["passed"] is True
    assert checks["rank_census"]["passed"] is False
    message = checks["rank_census"]["message"]
    assert "a.json" in message and "b.json" in message and "0" in message
    assert answer["valid"] is False

    good = upload(
        http,
        {"a.json": (_kineto(0, 2), "primary"), "b.json": (_kineto(1, 2), "primary")},
        {"parallelism": {"dp": 2}},
        name="good",
    )
    answer = http.post(f"/api/v1/tracesets/{good['id']}/validate").json()
    assert answer["valid"] is True  # a set no tool but HTA can read is still valid
    # The traceset's own checks, and apart from them which tools can read it (issue 43,
    # item 7): a tool it is not ready for is no failed check.
    assert {c["name"]: c["passed"] for c in answer["checks"]} == {
        "file_integrity": True,
        "metadata_complete": True,
        "rank_census": True,
        "parallelism_consistency": True,
        "process_groups": True,
        "stragglers": None,  # a warning at most (issue 45); no device event to analyse here
    }
    assert [(r["name"], r["tool"], r["ready"]) for r in answer["readiness"]] == [
        ("hta_ready", "HTA", True),
        ("chakra_ready", "Chakra", False),
        ("astra_ready", "ASTRA-sim", False),
        ("perfetto_ready", "Perfetto", True),
    ]
    assert answer["readiness"][1]["message"].startswith("no host execution trace for ranks 0..1")


def test_get_shows_where_each_files_ranks_come_from(http: TestClient) -> None:
    traceset = upload(http, _files(KINETO), {"shape": {"rankCount": 8}})
    shown = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
    for entry in shown["files"]:
        rank = int(entry["name"].removeprefix("worker").split("_")[0])
        assert entry["rankProvenance"] == f'distributedInfo {{"rank": {rank}, "world_size": 8}}'
    files = shown["inspection"]["files"]
    assert {f["rankSource"] for f in files} == {"distributedInfo"}
    ranks = shown["inspection"]["census"]["ranks"]
    assert [r["halves"] for r in ranks] == [["kineto"]] * 8


def test_get_shows_the_provenance_of_an_et_set_and_of_the_only_file(http: TestClient) -> None:
    et = TESTDATA / "pytorch-et-resnet50-ddp-2ranks"
    traceset = upload(http, _files(et), {"shape": {"rankCount": 2}})
    assert traceset["inspection"]["census"]["checks"]["rankCountMatches"]["passed"] is True
    for entry in traceset["files"]:
        assert "record_param_comms node" in entry["rankProvenance"]
    single = upload(http, {"all.bin": (b"opaque bytes", "primary")}, {"shape": {"rankCount": 4}})
    assert single["files"][0]["rankProvenance"] == (
        "the only primary file, taken to hold all 4 declared ranks (0..3)"
    )


def test_sets_that_looked_whole_now_fail_validate(http: TestClient) -> None:
    # The Megatron ET is rank 5 of 8, not the only file holding all 8 declared ranks.
    megatron = TESTDATA / "pytorch-et-megatron-tp8-rank5"
    traceset = upload(http, _files(megatron), {"shape": {"rankCount": 8}}, name="megatron")
    answer = http.post(f"/api/v1/tracesets/{traceset['id']}/validate").json()
    checks = {c["name"]: c for c in answer["checks"]}
    assert checks["rank_census"]["passed"] is False
    assert "7 of 8 ranks missing: 0..4, 6..7" in checks["rank_census"]["message"]
    # One unranked Kineto file recording world size 2 is one rank's trace, not both.
    single = upload(http, {"only.json": (_kineto(None, 2), "primary")}, {"shape": {"rankCount": 2}})
    assert single["inspection"]["census"]["checks"]["rankCountMatches"]["passed"] is True
    # (_kineto(None) writes no distributedInfo at all, so no world size: the rule applies.)
    info = json.dumps({"distributedInfo": {"world_size": 2}, "traceEvents": []}).encode()
    recorded = upload(http, {"w2.json": (info, "primary")}, {"shape": {"rankCount": 2}}, name="w2")
    check = recorded["inspection"]["census"]["checks"]["rankCountMatches"]
    assert check["passed"] is False
    assert check["message"].startswith("w2.json records world_size 2 but no rank")
