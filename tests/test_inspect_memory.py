"""Bounded memory: a large Kineto trace is inspected in a child process that stays small."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inspect_fixtures import BLOCK_COLLECTIVES, REPO_ROOT, kineto_parts

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child would
# report the parent's peak.
_CHILD = """
import json, re, sys
from pathlib import Path
from tracestore.inspect import inspect_path
result = inspect_path(sys.argv[1])
status = Path("/proc/self/status").read_text()
peak_mib = int(re.search(r"VmHWM:\\s+(\\d+) kB", status)[1]) / 1024
print(json.dumps({"peakMib": peak_mib, "inspection": result.to_json()}))
"""


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
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=280,
    )
    report = json.loads(child.stdout)
    inspection = report["inspection"]
    assert inspection["status"] == "complete", inspection["reason"]
    assert (inspection["rank"], inspection["worldSize"]) == (7, 16)
    assert inspection["collectives"] == {
        k: v * 1000 * batches for k, v in BLOCK_COLLECTIVES.items()
    }
    assert report["peakMib"] < 100, f"peak RSS {report['peakMib']:.0f} MiB"
