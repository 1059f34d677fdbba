"""HTA 0.5.0's numbers for a directory of Kineto traces, as JSON on standard output.

Run as ``python tests/support/hta_oracle.py DIR`` (the per-rank analysis) or ``python
tests/support/hta_oracle.py diff CONTROL TEST CONTROL_RANK TEST_RANK`` (TraceDiff), in a
process of its own (``ask`` starts one): HTA loads pandas and plotly and forks a pool per
directory, none of which belongs in the test process. The calls are those ANALYTICS.md names
as the oracle's.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

ALL_KERNELS = 1_000_000  # num_kernels: at least the number of distinct names, so none fold


def ask(*args: str) -> dict[str, Any]:
    """The oracle's JSON for ``args`` (its command line's), from a bounded child process."""
    answer = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=240
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    result: dict[str, Any] = json.loads(answer.stdout)
    return result


def numbers(directory: str) -> dict[str, Any]:
    """``{"ranks": {rank: {temporal, overlapPct, kernels, idle}}, "kinds": {label: µs}}``."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=directory, include_last_profiler_step=True)
    ranks: dict[int, dict[str, Any]] = {}
    for row in analysis.get_temporal_breakdown(visualize=False).to_dict("records"):
        ranks[int(row["rank"])] = {
            "temporal": {
                "idleTimeUs": float(row["idle_time(us)"]),
                "computeTimeUs": float(row["compute_time(us)"]),
                "nonComputeTimeUs": float(row["non_compute_time(us)"]),
                "kernelTimeUs": float(row["kernel_time(us)"]),
                "idlePct": float(row["idle_time_pctg"]),
                "computePct": float(row["compute_time_pctg"]),
                "nonComputePct": float(row["non_compute_time_pctg"]),
            },
            "kernels": [],
            "idle": [],
        }
    for row in analysis.get_comm_comp_overlap(visualize=False).to_dict("records"):
        pct = float(row["comp_comm_overlap_pctg"])
        ranks[int(row["rank"])]["overlapPct"] = None if pct != pct else pct  # NaN: no comms
    kinds, kernels = analysis.get_gpu_kernel_breakdown(
        visualize=False, include_memory_kernels=True, num_kernels=ALL_KERNELS
    )
    for row in kernels.to_dict("records"):
        ranks[int(row["rank"])]["kernels"].append(
            {
                "name": row["name"],
                "kind": row["kernel_type"],
                "sumUs": float(row["sum (us)"]),
                "maxUs": float(row["max (us)"]),
                "minUs": float(row["min (us)"]),
                "meanUs": float(row["mean (us)"]),
                "stddevUs": float(row["stddev"]),
            }
        )
    idle, _ = analysis.get_idle_time_breakdown(
        ranks=sorted(ranks), visualize=False, consecutive_kernel_delay=30
    )
    for row in idle.to_dict("records"):
        ranks[int(row["rank"])]["idle"].append(
            {
                "stream": int(row["stream"]),
                "category": row["idle_category"],
                "idleTimeUs": float(row["idle_time"]),
                "ratio": None
                if row["idle_time_ratio"] != row["idle_time_ratio"]
                else float(row["idle_time_ratio"]),
            }
        )
    return {
        "ranks": {str(rank): value for rank, value in ranks.items()},
        "kinds": {row["kernel_type"]: float(row["sum"]) for row in kinds.to_dict("records")},
    }


def trace_diff(
    control: str, test: str, control_rank: int | None, test_rank: int | None
) -> dict[str, Any]:
    """``TraceDiff.compare_traces`` and ``ops_diff`` of one rank of each directory, every
    iteration of each, GPU kernels: ``{"kernels": {name: {...}}, "sets": {added, ...}}``."""
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    base, other = LabeledTrace("control", trace_dir=control), LabeledTrace("test", trace_dir=test)
    every = {
        "control_rank": control_rank,
        "test_rank": test_rank,
        "control_iteration": base.iterations(),
        "test_iteration": other.iterations(),
        "device_type": DeviceType.GPU,
    }
    table = TraceDiff.compare_traces(base, other, **every)
    kernels = {
        str(name): {
            "baseCount": int(row["control_counts"]),
            "otherCount": int(row["test_counts"]),
            "baseDurationUs": float(row["control_total_duration"]),
            "otherDurationUs": float(row["test_total_duration"]),
            "diffCount": int(row["diff_counts"]),
            "diffDurationUs": float(row["diff_duration"]),
        }
        for name, row in table.to_dict("index").items()
    }
    sets = TraceDiff.ops_diff(base, other, **every)
    return {"kernels": kernels, "sets": {key: sorted(map(str, v)) for key, v in sets.items()}}


def _rank(text: str) -> int | None:
    return None if text == "-" else int(text)


if __name__ == "__main__":
    logging.disable(logging.CRITICAL)
    if sys.argv[1] == "diff":  # diff CONTROL_DIR TEST_DIR CONTROL_RANK TEST_RANK ("-": first)
        _, _, control, test, control_rank, test_rank = sys.argv
        json.dump(trace_diff(control, test, _rank(control_rank), _rank(test_rank)), sys.stdout)
    else:
        json.dump(numbers(sys.argv[1]), sys.stdout)
