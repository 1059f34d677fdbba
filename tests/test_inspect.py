"""Trace inspection of single files: the real samples, every format and wrapper, bad input."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from tests.support.inspect_fixtures import (
    BASE_TS,
    BLOCK_COLLECTIVES,
    BLOCK_SPAN,
    CHAKRA_BLOCK_COLLECTIVES,
    CHAKRA_BLOCK_NODES,
    chakra_allreduce,
    chakra_block,
    chakra_trace,
    execution_trace,
    kineto_trace,
)
from tests.support.paths import TESTDATA
from tracestore.inspect import FileInspection, inspect_file, inspect_path

KINETO_DIR = TESTDATA / "kineto-dlrm-8ranks"
CHAKRA_DIR = TESTDATA / "chakra-allreduce-4ranks"


def kineto_samples() -> list[Path]:
    assert KINETO_DIR.is_dir(), f"the repository carries its samples in tests/data: {KINETO_DIR}"
    return sorted(KINETO_DIR.glob("worker*.json"))


def chakra_samples() -> list[Path]:
    assert CHAKRA_DIR.is_dir(), f"the repository carries its samples in tests/data: {CHAKRA_DIR}"
    return sorted(CHAKRA_DIR.glob("*.et"))


def inspect_bytes(data: bytes, name: str, *, quick: bool = False) -> FileInspection:
    return inspect_file(lambda: io.BytesIO(data), name, quick=quick)


class _Unseekable(io.RawIOBase):
    """A stream that cannot seek, like an HTTP body."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._inner.read(min(len(buffer), 65536))
        buffer[: len(chunk)] = chunk
        return len(chunk)


# --- the real samples ----------------------------------------------------------------


@pytest.mark.parametrize("quick", [False, True])
def test_real_kineto_samples_give_rank_world_size_and_backend(quick: bool) -> None:
    paths = kineto_samples()
    assert len(paths) == 8
    for path in paths:
        result = inspect_path(path, path.name, quick=quick)
        expected_rank = int(path.name.removeprefix("worker").split("_")[0])
        assert result.status == "complete", result.reason
        assert result.format == "kineto_json"
        assert result.compression is None
        assert (result.rank, result.world_size, result.backend) == (expected_rank, 8, "nccl")
        assert result.rank_source == "distributedInfo"
        assert result.scan == ("quick" if quick else "full")


def test_real_kineto_full_scan_finds_collectives_and_time_span() -> None:
    result = inspect_path(kineto_samples()[0])
    assert result.collectives == {"all_reduce": 3, "all_to_all": 5}
    assert result.collective_events["record_param_comms"] == 13
    assert result.collective_events["ncclKernel_AllReduce_RING_LL_Sum_float"] == 3
    assert result.time_span is not None
    assert result.time_span.start_us == 1694128201426556
    assert result.time_span.end_us == 1694128201442995  # the "Record Window End" instant
    assert result.schema_version == "1"


def test_real_chakra_samples_take_rank_from_the_name() -> None:
    paths = chakra_samples()
    assert [p.name for p in paths] == [f"all_reduce.{r}.et" for r in range(4)]
    for rank, path in enumerate(paths):
        result = inspect_path(path, path.name)
        assert result.status == "complete", result.reason
        assert result.format == "chakra_et"
        assert (result.rank, result.rank_source, result.world_size) == (rank, "filename", None)
        assert result.node_counts == {"COMM_COLL_NODE": 1}
        assert result.collectives == {"all_reduce": 1}
        assert result.collective_bytes == {"all_reduce": 1_048_576}
        assert result.schema_version == "0.0.4"


def test_chakra_encoder_of_the_fixtures_reproduces_the_sample_bytes() -> None:
    assert chakra_trace(chakra_allreduce()) == chakra_samples()[0].read_bytes()


# --- synthetic traces ------------------------------------------------------------------


@pytest.mark.parametrize("info_at", ["head", "tail"])
def test_kineto_rank_is_found_before_or_after_trace_events(info_at: str) -> None:
    data = kineto_trace(5, 8, info_at=info_at, blocks=4)  # type: ignore[arg-type]
    full = inspect_bytes(data, "t.json")
    assert (full.rank, full.world_size, full.status) == (5, 8, "complete")
    assert full.collectives == {k: 4 * v for k, v in BLOCK_COLLECTIVES.items()}
    assert full.time_span is not None
    assert (full.time_span.start_us, full.time_span.end_us) == (
        BASE_TS + BLOCK_SPAN[0],
        BASE_TS + BLOCK_SPAN[1],
    )
    assert full.process_groups[0].size == 8
    assert full.process_groups[0].description == "default_pg"
    quick = inspect_bytes(data, "t.json", quick=True)
    assert (quick.rank, quick.world_size, quick.scan) == (5, 8, "quick")
    assert quick.collectives == {} and quick.time_span is None
    streamed = inspect_file(lambda: _Unseekable(data), "t.json", quick=True)
    assert streamed.rank == 5


def test_quick_mode_reads_only_the_head_when_distributed_info_leads() -> None:
    data = kineto_trace(2, 8, blocks=20_000)
    quick = inspect_bytes(data, "t.json", quick=True)
    assert quick.rank == 2
    assert quick.bytes_scanned < len(data) / 4


def test_quick_mode_seeks_to_the_tail_of_a_seekable_file() -> None:
    data = kineto_trace(6, 8, info_at="tail", blocks=40_000)
    assert len(data) > 20 * 1024 * 1024
    quick = inspect_bytes(data, "t.json", quick=True)
    assert quick.rank == 6
    assert quick.bytes_scanned < len(data) / 2


def test_kineto_without_distributed_info_is_unranked_not_rank_zero() -> None:
    result = inspect_bytes(kineto_trace(None, None, info_at="none"), "t.json")
    assert result.status == "complete"
    assert (result.rank, result.world_size, result.rank_source) == (None, None, None)


def test_kineto_base_time_shifts_the_time_span() -> None:
    data = kineto_trace(0, 1).replace(
        b'"traceName"', b'"baseTimeNanoseconds": 5000000, "traceName"'
    )
    result = inspect_bytes(data, "t.json")
    assert result.time_span is not None
    assert result.time_span.start_us == BASE_TS + 5000


def test_bare_event_array_is_a_kineto_trace() -> None:
    data = b'[{"ph": "X", "name": "nccl:broadcast", "ts": 10, "dur": 5}]'
    result = inspect_bytes(data, "events.json")
    assert (result.format, result.status, result.collectives) == (
        "kineto_json",
        "complete",
        {"broadcast": 1},
    )
    assert inspect_bytes(data[:-1], "events.json").status == "failed"


def test_execution_trace_gives_schema_pid_and_process_groups() -> None:
    result = inspect_bytes(execution_trace(world_size=16), "host_0.json")
    assert result.status == "complete", result.reason
    assert result.format == "pytorch_et_json"
    assert (result.schema_version, result.pid) == ("1.1.1-chakra.0.0.4", 2784631)
    assert result.world_size == 16 and result.backend == "nccl"
    assert result.rank is None
    assert [(g.name, g.description, g.size) for g in result.process_groups] == [
        ("0", "default_pg", 16)
    ]
    assert result.collectives == {"all_reduce": 2}


def test_chakra_counts_nodes_and_collectives() -> None:
    data = chakra_trace(chakra_block() + chakra_block(first_id=101))
    result = inspect_bytes(data, "llama.12.et")
    assert result.status == "complete", result.reason
    assert (result.rank, result.rank_source) == (12, "filename")
    assert result.node_counts == {k: 2 * v for k, v in CHAKRA_BLOCK_NODES.items()}
    assert result.collectives == {k: 2 * v for k, v in CHAKRA_BLOCK_COLLECTIVES.items()}
    assert result.collective_bytes == {"all_reduce": 6 * 4_194_304, "all_gather": 6 * 4_194_304}


def test_chakra_without_metadata_needs_an_et_name() -> None:
    data = chakra_trace(chakra_block(), version=None)
    assert inspect_bytes(data, "old.3.et").format == "chakra_et"
    assert inspect_bytes(data, "old.3.et").node_counts == CHAKRA_BLOCK_NODES
    assert inspect_bytes(data, "blob.bin").format == "unknown"


def test_chakra_name_without_a_rank_is_unranked() -> None:
    result = inspect_bytes(chakra_trace(chakra_allreduce()), "trace.et")
    assert (result.format, result.rank) == ("chakra_et", None)


# --- compression and archives ------------------------------------------------------------


@pytest.mark.parametrize("wrap", ["gzip", "zstd"])
def test_compressed_traces_are_read_transparently(wrap: str) -> None:
    raw = kineto_trace(3, 8, info_at="tail")
    data = gzip.compress(raw) if wrap == "gzip" else zstandard.ZstdCompressor().compress(raw)
    for quick in (False, True):
        result = inspect_bytes(data, "t.json." + wrap, quick=quick)
        assert (result.format, result.compression, result.rank) == ("kineto_json", wrap, 3)
        assert result.status == "complete", result.reason
    chakra = zstandard.ZstdCompressor().compress(chakra_trace(chakra_allreduce()))
    result = inspect_bytes(chakra, "ar.2.et.zst")
    assert (result.format, result.compression, result.rank) == ("chakra_et", "zstd", 2)


def test_zip_members_are_inspected_in_place(tmp_path: Path) -> None:
    path = tmp_path / "traces.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rank in range(4):
            archive.writestr(f"run/worker{rank}.json", kineto_trace(rank, 4))
        archive.writestr("run/README.md", "notes")
        archive.writestr("run/", "")
    result = inspect_path(path, "traces.zip")
    assert (result.format, result.status) == ("zip", "complete")
    assert [m.name for m in result.members] == [
        *(f"run/worker{r}.json" for r in range(4)),
        "run/README.md",
    ]
    assert [m.rank for m in result.members] == [0, 1, 2, 3, None]
    assert result.members[4].format == "unknown"


@pytest.mark.parametrize("mode", ["w:gz", "w:"])
def test_tar_members_are_streamed(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "traces.tar.gz"
    with tarfile.open(path, mode) as archive:  # type: ignore[call-overload]
        for rank in range(4):
            data = chakra_trace(chakra_allreduce())
            info = tarfile.TarInfo(f"ar.{rank}.et")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    result = inspect_path(path, "traces.tar.gz")
    assert (result.format, result.status) == ("tar", "complete")
    assert result.compression == ("gzip" if mode == "w:gz" else None)
    assert [m.rank for m in result.members] == [0, 1, 2, 3]
    unseekable = inspect_file(lambda: _Unseekable(path.read_bytes()), "traces.tar.gz")
    assert [m.rank for m in unseekable.members] == [0, 1, 2, 3]


def test_archives_nested_in_a_zip() -> None:
    inner_zip = io.BytesIO()
    with zipfile.ZipFile(inner_zip, "w") as archive:
        archive.writestr("w1.json.gz", gzip.compress(kineto_trace(1, 2)))
    inner_tar = io.BytesIO()
    with tarfile.open(fileobj=inner_tar, mode="w:gz") as archive:
        data = chakra_trace(chakra_allreduce())
        info = tarfile.TarInfo("ar.0.et")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("inner.zip", inner_zip.getvalue())
        archive.writestr("inner.tgz", inner_tar.getvalue())
    result = inspect_bytes(outer.getvalue(), "outer.zip")
    zipped, tarred = result.members
    assert (zipped.format, zipped.members[0].compression, zipped.members[0].rank) == (
        "zip",
        "gzip",
        1,
    )
    assert (tarred.format, tarred.compression, tarred.members[0].rank) == ("tar", "gzip", 0)


def test_zip_inside_a_tar_stream_fails_clearly() -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("w1.json", kineto_trace(1, 2))
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as archive:
        info = tarfile.TarInfo("inner.zip")
        info.size = len(inner.getvalue())
        archive.addfile(info, io.BytesIO(inner.getvalue()))
    result = inspect_bytes(outer.getvalue(), "outer.tar")
    assert result.status == "complete"
    member = result.members[0]
    assert (member.format, member.status) == ("zip", "failed")
    assert member.reason is not None and "random access" in member.reason


def test_zip_from_a_stream_that_cannot_seek_fails_clearly() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.json", kineto_trace(0, 1))
    result = inspect_file(lambda: _Unseekable(buffer.getvalue()), "a.zip")
    assert result.status == "failed"
    assert result.reason is not None and "random access" in result.reason


# --- broken and unknown input ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty.json", b""),
        ("notes.txt", b"just some text\n"),
        ("config.json", b'{"lr": 0.1, "steps": 10}'),
        ("random.bin", bytes(range(256)) * 10),
        ("weird.et", b"\xff\xff\xff\xff"),
    ],
)
def test_anything_else_is_unknown_and_never_an_error(name: str, data: bytes) -> None:
    result = inspect_bytes(data, name)
    assert (result.format, result.status, result.rank) == ("unknown", "complete", None)


def _truncations() -> list[tuple[str, bytes]]:
    kineto = kineto_trace(1, 8, blocks=50)
    chakra = chakra_trace(chakra_block() * 3)
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("w.json", kineto)
    return [
        ("w.json", kineto[: len(kineto) // 2]),
        ("w.json", kineto[: kineto.rindex(b"}", 0, len(kineto) - 200) + 1]),
        ("w.json.gz", gzip.compress(kineto)[:-100]),
        ("w.json.zst", zstandard.ZstdCompressor().compress(kineto)[:-50]),
        ("c.0.et", chakra[:-7]),
        ("c.0.et.gz", gzip.compress(chakra)[:-20]),
        ("w.zip", zipped.getvalue()[:-30]),
    ]


@pytest.mark.parametrize(("name", "data"), _truncations())
def test_truncated_files_fail_with_a_reason(name: str, data: bytes) -> None:
    result = inspect_bytes(data, name)
    assert result.status == "failed"
    assert result.reason
    assert "truncated" in result.reason or "malformed" in result.reason, result.reason


def test_truncated_kineto_keeps_what_was_read() -> None:
    data = kineto_trace(4, 8, blocks=50)
    result = inspect_bytes(data[: len(data) // 2], "w.json")
    assert result.reason is not None and result.reason.startswith("truncated")
    assert (result.rank, result.world_size) == (4, 8)


def test_truncated_tar_member_fails(tmp_path: Path) -> None:
    path = tmp_path / "t.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        data = kineto_trace(0, 1, blocks=200)
        info = tarfile.TarInfo("w.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    cut = path.read_bytes()[:-2000]
    result = inspect_bytes(cut, "t.tar.gz")
    assert result.status == "failed"
    assert result.reason


def test_an_opener_that_raises_gives_a_failed_result() -> None:
    def opener() -> io.BytesIO:
        raise PermissionError("denied")

    result = inspect_file(opener, "x.json")
    assert (result.status, result.reason) == ("failed", "cannot open: denied")


# --- the JSON form ------------------------------------------------------------------------


def test_to_json_is_camel_case_json_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.json", kineto_trace(1, 2))
    result = inspect_path(path)
    data = json.loads(json.dumps(result.to_json()))
    assert data["format"] == "zip" and data["members"][0]["worldSize"] == 2
    assert data["members"][0]["rankSource"] == "distributedInfo"
    assert set(data["members"][0]["timeSpan"]) == {"startUs", "endUs", "durationUs"}
    assert FileInspection.from_json(data) == result
