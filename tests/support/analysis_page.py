"""The traceset page's analysis, shared by the web tests that open it (the analysis, the
stragglers, the comparison): a served set uploaded and waited for until analysed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.support.paths import TESTDATA
from tests.support.seeding import sign_in
from tests.support.served import Served
from tests.support.waiting import wait_until
from tracestore.client import Client

KINETO = TESTDATA / "kineto-dlrm-8ranks"


def analysis_of(served: Served, traceset_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{served.url}/api/v1/tracesets/{traceset_id}/analysis",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def wait_analysed(served: Served, traceset_id: str, timeout: float = 120) -> dict[str, Any]:
    def analysed() -> dict[str, Any] | None:
        answer = analysis_of(served, traceset_id)
        return answer if answer["status"] != "pending" else None

    return wait_until(analysed, "the analysis is still pending", timeout=timeout, every=0.2)


def upload_files(served: Served, name: str, files: list[Path], ranks: int) -> str:
    with Client(served.url, served.token) as client:
        traceset = client.upload_traceset(
            files, name=name, workload_metadata={"shape": {"rankCount": ranks}}
        )
    return traceset.id


def open_analysis(page: Page, served: Served, traceset_id: str) -> Any:
    sign_in(page, served, f"/tracesets/{traceset_id}")
    section = page.locator("section.analysis")
    expect(section).to_be_visible()
    return section


def synthetic_answer(ranks: int, steps: int, slow: int) -> dict[str, Any]:
    """The analysis route's answer for ``ranks`` ranks, rank ``slow`` 3 times slower."""
    entries = []
    for rank in range(ranks):
        factor = 3 if rank == slow else 1 + (rank % 7) / 100
        entries.append(
            {
                "rank": rank,
                "file": f"rank{rank}.json",
                "status": "complete",
                "reason": None,
                "temporal": {"kernelTimeUs": 1000, "idleTimeUs": 300, "computeTimeUs": 500,
                             "nonComputeTimeUs": 200, "idlePct": 30.0, "computePct": 50.0,
                             "nonComputePct": 20.0},
                "overlap": {"communicationTimeUs": 100, "overlapTimeUs": 40, "pct": 40.0},
                "kindBreakdown": {"COMPUTATION": 700},
                "kernels": [{"name": "gemm", "kind": "COMPUTATION", "count": 10, "sumUs": 500,
                             "minUs": 50, "maxUs": 50, "meanUs": 50, "stddevUs": 0}],
                "idle": [{"stream": 7, "category": "kernel_wait", "idleTimeUs": 300, "ratio": 1}],
                "steps": [
                    {"step": s, "startUs": 0, "endUs": 1, "durationUs": 10_000 * factor,
                     "computeUs": 0, "communicationUs": 0, "overlapUs": 0, "idleUs": 0,
                     "truncated": False}
                    for s in range(steps)
                ],
            }
        )  # fmt: skip
    spread = {"median": 1, "min": 1, "max": 1}
    summary = {"rankCount": ranks, "computePct": spread, "nonComputePct": spread,
               "idlePct": spread, "overlapPct": spread, "stepTimeUs": spread,
               "slowestRank": slow, "fastestRank": 0}  # fmt: skip
    return {"status": "complete", "reason": None, "analyzedAt": "2026-12-01T00:00:00.000Z",
            "ranks": entries, "summary": summary}  # fmt: skip
