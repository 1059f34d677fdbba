"""``inspection.summary`` and the searchable facts derived from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.inspect_fixtures import kineto_trace, kineto_with_devices
from tests.support.paths import TESTDATA
from tracestore.inspect import FileInspection, inspect_path, rank_census
from tracestore.inspect.summary import (
    MAX_DISTINCT_VALUES,
    SEARCH_FACTS,
    search_facts,
    summary_world_size,
    traceset_summary,
)


def _summary(files: list[tuple[str, FileInspection]], declared: int | None) -> dict[str, Any]:
    census = rank_census(files, declared_rank_count=declared, workload_metadata=None)
    summary = traceset_summary(files, census)
    json.dumps(summary)
    return summary


def test_the_dlrm_kineto_set() -> None:
    paths = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
    files = [(p.name, inspect_path(p, p.name)) for p in paths]
    assert all(f.gpu_models == ("Tesla V100-SXM2-32GB",) for _, f in files)
    assert all(f.profiler_steps == 1 for _, f in files)  # ProfilerStep#10 in each
    summary = _summary(files, 8)
    assert summary["formats"] == ["kineto_json"]
    assert summary["ranksCaptured"] == 8 and summary["worldSize"] == 8
    assert summary["gpuModels"] == ["Tesla V100-SXM2-32GB"]
    assert summary["backends"] == ["nccl"] and summary["ncclVersions"] == []
    assert summary["profilerSteps"] == {"min": 1, "max": 1}
    span = summary["timeSpan"]
    assert isinstance(span, dict) and span["durationUs"] == span["endUs"] - span["startUs"] > 0
    assert summary["collectives"] == {
        name: sum(f.collectives.get(name, 0) for _, f in files)
        for name in sorted({n for _, f in files for n in f.collectives})
    }
    assert search_facts(summary) == {
        ("gpu_model", "tesla v100-sxm2-32gb"),
        ("gpu_model", "tesla"),
        ("gpu_model", "v100-sxm2-32gb"),
        ("backend", "nccl"),
        ("format", "kineto_json"),
    }
    assert summary_world_size(summary) == 8


def test_nccl_version_steps_and_devices_of_a_synthetic_trace(tmp_path: Path) -> None:
    data = kineto_trace(3, 4).decode()
    data = data.replace('"backend": "nccl"', '"backend": "nccl", "nccl_version": "2.18.1"', 1)
    data = data.replace(
        '{"id": 0, "name": "Tesla V100"}',
        '{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "NVIDIA H100 80GB HBM3"}',
    )
    steps = ",\n".join(
        f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "pid": 1, '
        f'"tid": 1, "ts": {1000 * n}, "dur": 900}}'
        for n in (4, 5, 5, 6)
    )
    data = data.replace('"traceEvents": [\n', '"traceEvents": [\n' + steps + ",\n", 1)
    path = tmp_path / "rank3.json"
    path.write_text(data)
    found = inspect_path(path, path.name)
    assert found.status == "complete", found.reason
    assert found.gpu_models == ("NVIDIA H100 80GB HBM3",)
    assert found.nccl_version == "2.18.1"
    assert found.profiler_steps == 3
    assert FileInspection.from_json(found.to_json()) == found
    other = inspect_path(path, path.name, quick=True)
    assert other.gpu_models == ("NVIDIA H100 80GB HBM3",)
    summary = _summary([(path.name, found)], None)
    assert summary["ncclVersions"] == ["2.18.1"]
    assert summary["ranksCaptured"] == 1 and summary["worldSize"] == 4
    facts = search_facts(summary)
    assert {("gpu_model", "h100"), ("gpu_model", "nvidia h100 80gb hbm3")} <= facts
    assert ("nccl_version", "2.18.1") in facts


def test_chakra_and_execution_traces_have_no_gpu_facts() -> None:
    directory = TESTDATA / "chakra-et-stg-dp2tp2-4ranks"
    files = [(p.name, inspect_path(p, p.name)) for p in sorted(directory.iterdir())]
    summary = _summary(files, 4)
    assert summary["formats"] == ["chakra_et", "comm_groups"]
    assert summary["gpuModels"] == [] and summary["profilerSteps"] is None
    assert summary["timeSpan"] is None and summary["worldSize"] == 4
    assert summary["ranksCaptured"] == 4
    assert set(summary["collectives"]) == {"all_gather", "all_reduce", "reduce_scatter"}
    assert search_facts(summary) == {("format", "chakra_et"), ("format", "comm_groups")}
    et = TESTDATA / "pytorch-et-megatron-tp8-rank5" / "megatron_et_5.json"
    single = _summary([(et.name, inspect_path(et, et.name))], 8)
    assert single["ranksCaptured"] == 1 and single["worldSize"] == 8


def test_an_empty_set() -> None:
    summary = _summary([], None)
    assert summary["formats"] == [] and summary["worldSize"] is None
    assert search_facts(summary) == set()


@pytest.mark.timeout(60)  # a hang guard: the lists' membership tests took minutes here
def test_a_hundred_thousand_distinct_gpu_models_are_kept_once_and_cut(tmp_path: Path) -> None:
    """Issue 41: 100,000 distinct deviceProperties names are deduplicated with one look-up
    each, and the summary keeps 32 of them, saying how many it left out."""
    data, names = kineto_with_devices(100_000)
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    assert len(data) < 4 * 1024 * 1024
    found = inspect_path(path, path.name)
    assert found.status == "complete", found.reason
    assert found.gpu_models == tuple(names)
    files = [(path.name, found), ("again.json", found)]
    summary = _summary(files, None)
    assert summary["gpuModels"] == names[:MAX_DISTINCT_VALUES]
    assert summary["valuesCut"] == {"gpuModels": 100_000 - MAX_DISTINCT_VALUES}
    facts = search_facts(summary)
    gpu = {value for fact, value in facts if fact == "gpu_model"}
    assert {"gpu 00000", "gpu 00031", "gpu", "00030"} <= gpu
    assert len(gpu) == 2 * MAX_DISTINCT_VALUES  # 32 names and 32 of their words
    assert len(facts) <= (len(SEARCH_FACTS) + 1) * MAX_DISTINCT_VALUES
    census = rank_census(files, declared_rank_count=None, workload_metadata=None)
    three = traceset_summary(files, census, max_values=3)
    assert three["gpuModels"] == names[:3] and three["valuesCut"] == {"gpuModels": 99_997}
    assert len(search_facts(three, max_values=3)) == 3 + 3 + 1 + 1  # names, words, backend, format
