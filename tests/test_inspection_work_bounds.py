"""Issue 41 through the real app: the seed's largest rank count, degrees at that bound and a
file naming 100,000 GPU models are completed, inspected, read back and validated in work
bounded by the files sent: the missing ranks are one run in the stored inspection and in
every message, and the searchable facts a traceset inserts are capped.

Each upload runs inside ``bounded_memory`` (a GiB of heap for the test's thread, four of
address space for the process): the old per-rank lists fail the test at once, with a
MemoryError, instead of taking the machine.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.support.bounded import bounded_memory
from tests.support.inspect_fixtures import (
    chakra_allreduce,
    chakra_trace,
    kineto_trace,
    kineto_with_devices,
)
from tests.support.uploading import upload
from tracestore.inspect.summary import MAX_DISTINCT_VALUES, SEARCH_FACTS
from tracestore.server import db
from tracestore.server.services import Services

pytestmark = pytest.mark.slow  # hypothesis and memory-bounded uploads

BOUND = 2_147_483_647  # shape.rankCount's largest value in the rules

# Ranks 0 and 5 of a world of 8 (each with its default process group of 8) and rank 3's
# Chakra trace: three small files against 2³¹−1 expected ranks.
FILES = {
    "rank0.pt.trace.json": (kineto_trace(0, 8), "primary"),
    "rank5.pt.trace.json": (kineto_trace(5, 8), "primary"),
    "trace.3.et": (chakra_trace(chakra_allreduce()), "primary"),
}


@pytest.mark.parametrize(
    "metadata",
    [
        {"shape": {"rankCount": BOUND}},
        {"shape": {"rankCount": BOUND}, "parallelism": {"dp": 1, "tp": BOUND}},
        {"parallelism": {"pp": BOUND, "cp": BOUND}},
    ],
    ids=["rankCount", "tp", "pp-and-cp"],
)
def test_the_largest_rank_count_is_inspected_and_validated_in_bounded_memory(
    http: TestClient, metadata: dict[str, Any]
) -> None:
    with bounded_memory(1024) as peak:
        traceset = upload(http, FILES, metadata)
        shown = http.get(f"/api/v1/tracesets/{traceset['id']}").json()
        answer = http.post(f"/api/v1/tracesets/{traceset['id']}/validate").json()
    assert peak.mib < 32, f"completing, reading and validating held {peak.mib:.0f} MiB"
    assert traceset["rankCountDerived"] == BOUND
    inspection = shown["inspection"]
    assert inspection["status"] == "complete"
    census = inspection["census"]
    assert census["expectedRankCount"] == BOUND
    assert census["ranksMissing"] == [
        {"start": 1, "end": 2},
        {"start": 4, "end": 4},
        {"start": 6, "end": BOUND - 1},
    ]
    assert census["missingCount"] == BOUND - 3
    ready = inspection["readiness"]
    assert ready["hta"]["message"] == f"no Kineto trace for ranks 1..4, 6..{BOUND - 1}"
    assert ready["astra"]["message"].startswith(f"no Chakra trace for ranks 0..2, 4..{BOUND - 1}")
    assert ready["chakra"]["message"].endswith(f"neither trace for ranks 1..4, 6..{BOUND - 1}")
    checks = {check["name"]: check for check in answer["checks"]}
    assert (
        f"{BOUND - 3} of {BOUND} ranks missing: 1..2, 4, 6..{BOUND - 1}"
        in (checks["rank_census"]["message"])
    )
    assert checks["process_groups"]["passed"] is True
    assert len(json.dumps(shown)) < 64 * 1024


def test_the_only_file_of_the_largest_rank_count_holds_every_rank(http: TestClient) -> None:
    files = {"all.json": (b'{"traceEvents": []}', "primary")}
    with bounded_memory(1024) as peak:
        traceset = upload(http, files, {"shape": {"rankCount": BOUND}})
        answer = http.post(f"/api/v1/tracesets/{traceset['id']}/validate").json()
    assert peak.mib < 32, f"the upload held {peak.mib:.0f} MiB"
    assert traceset["files"][0]["rankRange"] == {"start": 0, "end": BOUND - 1}
    census = traceset["inspection"]["census"]
    assert census["checks"]["rankCountMatches"]["passed"] is True
    readiness = {entry["name"]: entry for entry in answer["readiness"]}
    assert readiness["hta_ready"]["message"] == (
        f"1 Kineto traces record no rank: all.json; no Kineto trace for ranks 0..{BOUND - 1}"
    )


@pytest.mark.timeout(120)  # a hang guard: the lists' membership tests took minutes here
def test_a_hundred_thousand_gpu_models_insert_a_capped_number_of_facts(
    http: TestClient, services: Services
) -> None:
    data, names = kineto_with_devices(100_000)
    traceset = upload(http, {"rank0.json": (data, "primary")}, {"shape": {"rankCount": 1}})
    summary = traceset["inspection"]["summary"]
    assert summary["gpuModels"] == names[:MAX_DISTINCT_VALUES]
    assert summary["valuesCut"] == {"gpuModels": 100_000 - MAX_DISTINCT_VALUES}
    with services.db.session(write=False) as session:
        rows = session.scalar(
            select(func.count())
            .select_from(db.TracesetFact)
            .where(db.TracesetFact.traceset_id == traceset["id"])
        )
    assert rows is not None and rows <= (len(SEARCH_FACTS) + 1) * MAX_DISTINCT_VALUES
    found = http.get("/api/v1/tracesets", params={"inspected.gpu_model": "GPU 00031"}).json()
    assert [item["id"] for item in found["items"]] == [traceset["id"]]
    cut = http.get("/api/v1/tracesets", params={"inspected.gpu_model": "GPU 00032"}).json()
    assert cut["items"] == []
