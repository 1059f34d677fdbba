"""The census before upload, ``POST /api/v1/tracesets/upload-url/census`` (issue 43, item
6): from each file's first bytes it gives the verdict ``tracestore upload`` gives the whole
files before it sends them (the very messages), says ``unknown`` rather than guess when the
bytes sent do not tell a file's rank, and creates nothing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.paths import TESTDATA
from tests.support.uploading import record_counts
from tracestore import metadata
from tracestore.cli.common import census_problems
from tracestore.schemas.uploads import CENSUS_HEAD_BYTES
from tracestore.server.services import Services

CENSUS = "/api/v1/tracesets/upload-url/census"
KINETO = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
ET = sorted((TESTDATA / "pytorch-et-resnet50-ddp-2ranks").iterdir())
EIGHT = {"shape": {"rankCount": 8}}


def body(paths: list[Path], meta: Any, head: int = CENSUS_HEAD_BYTES) -> dict[str, Any]:
    """What the page sends: each file's first ``head`` bytes, base64."""
    files = []
    for path in paths:
        data = path.read_bytes()
        files.append(
            {"name": path.name, "size": len(data), "head": base64.b64encode(data[:head]).decode()}
        )
    return {"files": files, "workloadMetadata": meta}


def _cli_verdict(paths: list[Path], meta: Any) -> list[str]:
    declared = metadata.check_upload_metadata(meta, has_primary_files=True)
    return census_problems(paths, "primary", meta, declared)


@pytest.mark.parametrize(
    ("ranks", "verdict", "missing"),
    [(range(8), "pass", 0), ([0, 1, 2, 4, 5, 6, 7], "fail", 1), ([0, 1, 2, 3], "fail", 4)],
    ids=["whole", "no rank 3", "4 of 8"],
)
def test_the_verdict_is_the_clis_on_the_whole_files(
    http: TestClient, services: Services, ranks: Any, verdict: str, missing: int
) -> None:
    paths = [KINETO[r] for r in ranks]
    before = record_counts(services)
    answer = http.post(CENSUS, json=body(paths, EIGHT))
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert (found["census"], found["missingRanks"], found["unread"]) == (verdict, missing, [])
    assert found["problems"] == _cli_verdict(paths, EIGHT)  # word for word
    assert found["ranksFound"] == sorted(ranks) and found["expectedRankCount"] == 8
    if missing == 1:
        assert found["problems"][0].startswith("1 of 8 ranks missing: 3 (expected 0..7")
    assert record_counts(services) == before  # nothing created


def test_a_rank_past_the_bytes_sent_is_unknown_not_missing(http: TestClient) -> None:
    # A Kineto trace's distributedInfo is 3.3 KB in: 4 KiB tell its rank, 1 KiB does not.
    told = http.post(CENSUS, json=body(KINETO, EIGHT, head=4096)).json()
    assert (told["census"], told["missingRanks"], told["unread"]) == ("pass", 0, [])
    short = http.post(CENSUS, json=body(KINETO, EIGHT, head=1024)).json()
    assert (short["census"], short["missingRanks"]) == ("unknown", None)
    assert short["unread"] == [p.name for p in KINETO]
    # These execution traces' ranks are decided past their first MiB (the CLI reads on).
    meta = {"shape": {"rankCount": 2}}
    assert _cli_verdict(ET, meta) == []
    et = http.post(CENSUS, json=body(ET, meta)).json()
    assert (et["census"], et["unread"]) == ("unknown", [p.name for p in ET])


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"workloadMetadata": {"shape": {"rankCount": 0}}}, 400, "workloadMetadata.shape"),
        ({"workloadMetadata": None}, 400, "workloadMetadata"),
        ({"files": []}, 400, "files"),
        (
            {"files": [{"name": "a", "size": 1, "head": "!!"}]},
            400,
            "head of 'a' must be base64 (RFC 4648, padded)",
        ),
        ({"files": [{"name": "../a", "size": 1, "head": ""}]}, 400, "File name '../a'"),
        (
            {"files": [{"name": "a", "size": 1, "head": ""}, {"name": "a", "size": 1, "head": ""}]},
            400,
            "File name 'a' appears more than once",
        ),
        (
            {
                "files": [
                    {"name": "a", "size": 9**9, "head": "A" * (CENSUS_HEAD_BYTES // 3 * 4 + 4)}
                ]
            },
            400,
            "head of 'a' holds 1048578 bytes; send at most its first 1048576",
        ),
    ],
)
def test_bad_bodies_are_400s_naming_what_is_wrong(
    http: TestClient, change: dict[str, Any], status: int, message: str
) -> None:
    answer = http.post(CENSUS, json={**body(KINETO[:1], EIGHT), **change})
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]["message"]


def test_the_upload_urls_metadata_refusal_is_word_for_word(http: TestClient) -> None:
    meta = {"shape": {"rankCount": 8}, "parallelism": {"tp": "8"}}
    upload = http.post(
        "/api/v1/tracesets/upload-url",
        json={
            "name": "x",
            "files": [{"name": "a", "size": 1, "role": "primary"}],
            "workloadMetadata": meta,
        },
    )
    census = http.post(CENSUS, json=body(KINETO[:1], meta))
    assert upload.status_code == census.status_code == 400
    assert census.json()["error"]["message"] == upload.json()["error"]["message"]
