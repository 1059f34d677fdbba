"""Bounded memory: a large Kineto trace is inspected in a child process that stays small."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inspect_fixtures import BLOCK_COLLECTIVES, inspect_in_child, kineto_parts


@pytest.mark.slow
def test_half_a_gibibyte_kineto_trace_is_scanned_in_under_100_mib(tmp_path: Path) -> None:
    head, block, tail = kineto_parts(7, 16, info_at="tail")
    batch = b",\n".join([block] * 1000)
    batches = (512 * 1024 * 1024) // len(batch)
    path = tmp_path / "big.pt.trace.json"
    with path.open("wb") as out:
        out.write(head)
        for index in range(batches):
            out.write(b",\n" + batch if index else batch)
        out.write(tail)
    assert path.stat().st_size > 500 * 1024 * 1024
    report = inspect_in_child(path, timeout=280)
    inspection = report["inspection"]
    assert inspection["status"] == "complete", inspection["reason"]
    assert (inspection["rank"], inspection["worldSize"]) == (7, 16)
    assert inspection["collectives"] == {
        k: v * 1000 * batches for k, v in BLOCK_COLLECTIVES.items()
    }
    assert report["peakMib"] < 100, f"peak RSS {report['peakMib']:.0f} MiB"
