"""Consumer readiness: hta_ready, chakra_ready, astra_ready, perfetto_ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.bounded import bounded_memory
from tests.support.inspect_fixtures import execution_trace_parts, kineto_trace
from tests.support.paths import TESTDATA
from tracestore.inspect import FileInspection, inspect_path, rank_census
from tracestore.inspect.readiness import readiness, readiness_checks


def _ready(paths: list[Path], declared: int | None) -> dict[str, Any]:
    files = [(p.name, inspect_path(p, p.name)) for p in paths]
    return _of(files, declared)


def _of(files: list[tuple[str, FileInspection]], declared: int | None) -> dict[str, Any]:
    census = rank_census(files, declared_rank_count=declared, workload_metadata=None)
    return readiness(files, census)


def _sample(folder: str) -> list[Path]:
    return sorted((TESTDATA / folder).iterdir())


def test_the_dlrm_kineto_set_is_ready_for_hta_and_perfetto_only() -> None:
    ready = _ready(_sample("kineto-dlrm-8ranks"), 8)
    assert ready["hta"]["passed"] is True
    assert ready["hta"]["message"].startswith(
        "8 Kineto traces, one per rank: 0: worker0_step_12.1694128201545.pt.trace.json, 1: worker1_"
    )
    assert ready["chakra"] == {
        "passed": False,
        "warning": False,
        "message": ready["chakra"]["message"],
    }
    assert ready["chakra"]["message"].startswith(
        "no host execution trace for ranks 0..7 (Kineto: worker0_step_12"
    )
    assert not ready["astra"]["passed"]
    assert ready["astra"]["message"].startswith("no Chakra execution traces: ASTRA-sim reads")
    assert ready["perfetto"]["passed"] is True
    assert "under 1.00 GiB uncompressed; the largest is worker" in ready["perfetto"]["message"]
    entries = readiness_checks(ready)
    assert [(c["name"], c["tool"], c["ready"]) for c in entries] == [
        ("hta_ready", "HTA", True),
        ("chakra_ready", "Chakra", False),
        ("astra_ready", "ASTRA-sim", False),
        ("perfetto_ready", "Perfetto", True),
    ]


def test_execution_traces_alone_lack_their_device_half() -> None:
    ready = _ready(_sample("pytorch-et-resnet50-ddp-2ranks"), 2)
    assert ready["hta"] == {
        "passed": False,
        "warning": False,
        "message": "no Kineto traces: HTA reads the PyTorch profiler's JSON",
    }
    assert ready["chakra"]["message"] == (
        "no device Kineto trace for ranks 0..1 (execution trace: eg.rank_0.pt.trace.json, "
        "eg.rank_1.pt.trace.json)"
    )


def test_both_halves_of_every_rank_are_chakra_ready(tmp_path: Path) -> None:
    paths = []
    for rank in range(2):
        kineto = tmp_path / f"kineto_{rank}.json"
        kineto.write_bytes(kineto_trace(rank, 2))
        head, block, tail = execution_trace_parts(rank, 2)
        host = tmp_path / f"et_{rank}.json"
        host.write_bytes(head + block + tail)
        paths += [kineto, host]
    ready = _ready(paths, 2)
    assert ready["chakra"] == {
        "passed": True,
        "warning": False,
        "message": "each of ranks 0..1 has its host execution trace and its device Kineto trace",
    }
    assert (
        ready["hta"]["message"]
        == "2 Kineto traces, one per rank: 0: kineto_0.json, 1: kineto_1.json"
    )
    # Drop rank 1's host half and add an unranked Kineto trace: both named.
    (tmp_path / "et_1.json").unlink()
    stray = tmp_path / "stray.json"
    stray.write_bytes(kineto_trace(None, None))
    ready = _ready([p for p in paths if p.exists()] + [stray], 2)
    assert (
        ready["chakra"]["message"] == "no host execution trace for ranks 1 (Kineto: kineto_1.json)"
    )
    assert ready["hta"]["message"] == "1 Kineto traces record no rank: stray.json"


def test_a_megatron_rank_alone_misses_the_other_ranks(tmp_path: Path) -> None:
    kineto = tmp_path / "megatron_kineto_5.json"
    kineto.write_bytes(kineto_trace(5, 8))
    ready = _ready([*_sample("pytorch-et-megatron-tp8-rank5"), kineto], 8)
    assert ready["chakra"]["message"] == "neither trace for ranks 0..4, 6..7"
    assert ready["hta"]["message"] == "no Kineto trace for ranks 0..4, 6..7"


def test_chakra_sets_named_by_rank_are_astra_ready(tmp_path: Path) -> None:
    ready = _ready(_sample("chakra-allreduce-4ranks"), 4)
    assert ready["astra"]["message"] == "ranks 0..3 as all_reduce.<rank>.et, one file each"
    assert ready["astra"]["passed"] is True
    three = _ready(_sample("chakra-et-allreduce-3pg-2ranks"), 2)
    assert three["astra"]["message"] == "ranks 0..1 as chakra_trace.<rank>.et, one file each"
    # The same traces under other names: their ranks are inside, so they are nameable.
    for rank, source in enumerate(
        p for p in _sample("chakra-et-allreduce-3pg-2ranks") if p.suffix == ".et"
    ):
        (tmp_path / f"host-{'ab'[rank]}.et").write_bytes(source.read_bytes())
    renamed = _ready(sorted(tmp_path.iterdir()), 2)
    assert renamed["astra"]["passed"] is True
    assert renamed["astra"]["message"] == (
        "ranks 0..1 each have one Chakra trace; nameable as <prefix>.<rank>.et: "
        "host-a.et → trace.0.et, host-b.et → trace.1.et"
    )


def test_chakra_gaps_prefixes_and_json_dumps_are_not_astra_ready(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        source = TESTDATA / "chakra-allreduce-4ranks" / f"all_reduce.{rank}.et"
        (tmp_path / source.name).write_bytes(source.read_bytes())
    gap = _ready(sorted(tmp_path.iterdir()), 4)
    assert gap["astra"] == {
        "passed": False,
        "warning": False,
        "message": "no Chakra trace for ranks 2",
    }
    jsonized = _ready(_sample("chakra-json-stg-jsonized"), None)
    assert not jsonized["astra"]["passed"]
    assert "rank 0 is in 2 Chakra traces: j0_0.json, j1_0.json" in jsonized["astra"]["message"]
    assert "Chakra JSON is a dump for reading" in jsonized["astra"]["message"]


def test_a_json_trace_past_a_gib_is_not_perfetto_ready() -> None:
    big = FileInspection(
        name="huge.json", format="kineto_json", rank=0, bytes_scanned=3 * 1024**3 // 2
    )
    small = FileInspection(
        name="small.json", format="kineto_json", rank=1, bytes_scanned=5 * 1024**2
    )
    ready = _of([("huge.json", big), ("small.json", small)], 2)
    assert ready["perfetto"]["message"] == (
        "1 JSON traces past the 1.00 GiB a browser viewer opens (uncompressed): "
        "huge.json (1.50 GiB)"
    )
    assert _of([("small.json", small)], 1)["perfetto"]["message"] == (
        "every JSON trace is under 1.00 GiB uncompressed; the largest is small.json (5.0 MiB)"
    )
    assert _of([], None)["perfetto"] == {
        "passed": True,
        "warning": False,
        "message": "no JSON traces to open in a browser viewer",
    }


# --- issue 41: the checks answer in work bounded by the files, not by the declared count ----

BOUND = 2_147_483_647  # the seed's largest rank count


def _ranked(name: str, fmt: str, rank: int) -> FileInspection:
    return FileInspection(name=name, format=fmt, rank=rank)  # type: ignore[arg-type]


def test_the_largest_declared_count_is_one_missing_interval_in_every_check() -> None:
    files = [
        ("k0.json", _ranked("k0.json", "kineto_json", 0)),
        ("e0.json", _ranked("e0.json", "pytorch_et_json", 0)),
        ("k5.json", _ranked("k5.json", "kineto_json", 5)),
        ("t.0.et", _ranked("t.0.et", "chakra_et", 0)),
        ("t.1.et", _ranked("t.1.et", "chakra_et", 1)),
    ]
    with bounded_memory(512) as peak:
        ready = _of(files, BOUND)
    assert peak.mib < 2, f"readiness of {len(files)} files held {peak.mib:.0f} MiB"
    assert ready["hta"]["message"] == f"no Kineto trace for ranks 1..4, 6..{BOUND - 1}"
    assert ready["chakra"]["message"] == (
        "no host execution trace for ranks 5 (Kineto: k5.json); "
        f"neither trace for ranks 1..4, 6..{BOUND - 1}"
    )
    assert ready["astra"]["message"] == f"no Chakra trace for ranks 2..{BOUND - 1}"


def test_a_rank_a_file_records_at_the_bound_is_one_missing_interval() -> None:
    files = [(f"t.{r}.et", _ranked(f"t.{r}.et", "chakra_et", r)) for r in (0, BOUND - 1)]
    with bounded_memory(512) as peak:
        ready = _of(files, None)  # expected from the highest rank found
    assert peak.mib < 2, f"readiness held {peak.mib:.0f} MiB"
    assert ready["astra"]["message"] == f"no Chakra trace for ranks 1..{BOUND - 2}"
    assert ready["hta"]["message"].startswith("no Kineto traces")
