"""The rank census: real sample sets, synthetic sets written to tmp_path, and plain data."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard

from tests.support.inspect_fixtures import census_of, chakra_allreduce, chakra_trace, kineto_trace
from tests.support.paths import TESTDATA
from tracestore.inspect import (
    FileInspection,
    ProcessGroup,
    RankRange,
    rank_census,
    validation_checks,
)


def write_kineto_set(
    directory: Path, ranks: list[int | None], world: int | None, wrap: str = ""
) -> list[Path]:
    paths = []
    for index, rank in enumerate(ranks):
        data = kineto_trace(rank, world)
        if wrap == "gz":
            data = gzip.compress(data)
        elif wrap == "zst":
            data = zstandard.ZstdCompressor().compress(data)
        path = directory / f"trace_{index}.pt.trace.json{'.' + wrap if wrap else ''}"
        path.write_bytes(data)
        paths.append(path)
    return paths


def write_chakra_set(directory: Path, prefix: str, ranks: range) -> list[Path]:
    paths = []
    for rank in ranks:
        path = directory / f"{prefix}.{rank}.et"
        path.write_bytes(chakra_trace(chakra_allreduce()))
        paths.append(path)
    return paths


def fake(name: str, rank: int | None, world: int | None = None) -> FileInspection:
    return FileInspection(
        name=name,
        format="kineto_json",
        rank=rank,
        world_size=world,
        rank_source="distributedInfo" if rank is not None else None,
    )


# --- the real samples ----------------------------------------------------------------


def test_real_kineto_set_is_complete() -> None:
    directory = TESTDATA / "kineto-dlrm-8ranks"
    assert directory.is_dir(), f"the repository carries its samples in tests/data: {directory}"
    census, _ = census_of(sorted(directory.iterdir()), 8, {"parallelism": {"dp": 8}})
    assert census.ranks_found == tuple(range(8))
    assert census.ranks_missing == () and census.duplicated == {}
    assert census.world_sizes.keys() == {8}
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    assert census.parallelism_consistent.passed, census.parallelism_consistent.message
    assert census.rank_ranges["worker3_step_12.1694128201557.pt.trace.json"] == RankRange(3, 3)


def test_real_chakra_set_takes_world_size_four_from_the_set() -> None:
    directory = TESTDATA / "chakra-allreduce-4ranks"
    assert directory.is_dir(), f"the repository carries its samples in tests/data: {directory}"
    census, _ = census_of(sorted(directory.iterdir()), None)
    assert (census.expected_rank_count, census.expected_from) == (4, "ranks")
    assert census.ranks_found == (0, 1, 2, 3)
    assert census.chakra_prefixes == {"all_reduce": (0, 1, 2, 3)}
    assert census.rank_count_matches.passed
    declared, _ = census_of(sorted(directory.iterdir()), 4, {"parallelism": {"tp": 2, "dp": 2}})
    assert declared.rank_count_matches.passed and declared.parallelism_consistent.passed


# --- synthetic sets --------------------------------------------------------------------


def test_complete_eight_rank_set(tmp_path: Path) -> None:
    census, _ = census_of(write_kineto_set(tmp_path, list(range(8)), 8), 8)
    assert census.rank_count_matches.passed
    assert census.rank_count_matches.message == (
        "ranks 0..7 each recorded by one file, matching the declared rank count 8"
    )
    assert [c["name"] for c in validation_checks(census.to_json())] == [
        "rank_census",
        "parallelism_consistency",
        "process_groups",
    ]


def test_missing_rank_is_named(tmp_path: Path) -> None:
    census, _ = census_of(write_kineto_set(tmp_path, [0, 1, 2, 4, 5, 6, 7], 8), 8)
    assert census.ranks_missing == (RankRange(3, 3),)
    assert census.missing_count == 1
    assert not census.rank_count_matches.passed
    assert "1 of 8 ranks missing: 3" in census.rank_count_matches.message


def test_duplicated_rank_lists_both_files(tmp_path: Path) -> None:
    paths = write_kineto_set(tmp_path, [0, 1, 1, 2, 3], 4)
    census, _ = census_of(paths, 4)
    assert census.duplicated == {1: ("trace_1.pt.trace.json", "trace_2.pt.trace.json")}
    assert not census.rank_count_matches.passed
    assert (
        "rank 1 is recorded by 2 files: trace_1.pt.trace.json, trace_2.pt.trace.json"
        in census.rank_count_matches.message
    )


def test_rank_recorded_only_at_the_end_of_a_file(tmp_path: Path) -> None:
    paths = write_kineto_set(tmp_path, [0, 1], 3)
    tail = tmp_path / "late.json"
    tail.write_bytes(kineto_trace(2, 3, info_at="tail"))
    census, files = census_of([*paths, tail], 3)
    assert files["late.json"].rank == 2
    assert census.rank_count_matches.passed, census.rank_count_matches.message


def test_file_without_rank_is_unranked_not_rank_zero(tmp_path: Path) -> None:
    paths = write_kineto_set(tmp_path, [None, 1, 2, 3], 4)
    census, files = census_of(paths, 4)
    assert files["trace_0.pt.trace.json"].rank is None
    assert census.unranked_files == ("trace_0.pt.trace.json",)
    assert census.ranks_missing == (RankRange(0, 0),)
    message = census.rank_count_matches.message
    assert "ranks missing: 0" in message
    assert "1 without a rank: trace_0.pt.trace.json" in message


@pytest.mark.parametrize("wrap", ["gz", "zst"])
def test_compressed_sets(tmp_path: Path, wrap: str) -> None:
    census, files = census_of(write_kineto_set(tmp_path, list(range(4)), 4, wrap), 4)
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    assert {f.compression for f in files.values()} == {"gzip" if wrap == "gz" else "zstd"}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


Packer = Callable[[Path, dict[str, bytes]], Path]


@pytest.mark.parametrize(("suffix", "pack"), [(".zip", _zip), (".tar.gz", _tar_gz)])
def test_archived_sets(tmp_path: Path, suffix: str, pack: Packer) -> None:
    members = {f"rank{r}.json": kineto_trace(r, 8) for r in range(8)}
    members["README.md"] = b"how this was traced"
    archive = pack(tmp_path / f"traces{suffix}", members)
    census, _ = census_of([archive], 8)
    assert census.ranks_found == tuple(range(8))
    assert census.unranked_files == ()  # the README inside is not a trace
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    assert census.rank_ranges == {archive.name: RankRange(0, 7)}
    halves = [
        pack(tmp_path / f"a{suffix}", {f"r{r}.json": kineto_trace(r, 8) for r in range(4)}),
        pack(tmp_path / f"b{suffix}", {f"r{r}.json": kineto_trace(r, 8) for r in range(4, 8)}),
    ]
    split, _ = census_of(halves, 8)
    assert split.rank_ranges == {f"a{suffix}": RankRange(0, 3), f"b{suffix}": RankRange(4, 7)}
    assert split.rank_count_matches.passed


def test_archive_member_duplicates_name_the_member(tmp_path: Path) -> None:
    archive = _zip(
        tmp_path / "t.zip", {"x/r0.json": kineto_trace(0, 2), "y/r0.json": kineto_trace(0, 2)}
    )
    census, _ = census_of([archive], 2)
    assert census.duplicated == {0: ("t.zip:x/r0.json", "t.zip:y/r0.json")}
    assert census.ranks_missing == (RankRange(1, 1),)
    assert census.rank_ranges == {"t.zip": RankRange(0, 1)}  # the only primary file


def test_truncated_file_is_reported(tmp_path: Path) -> None:
    paths = write_kineto_set(tmp_path, [0, 1], 2)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 2])
    census, files = census_of(paths, 2)
    assert files[paths[1].name].status == "failed"
    assert census.failed_files.keys() == {paths[1].name}
    assert census.ranks_found == (0, 1)  # its rank was read before the break
    assert "1 not fully readable: trace_1.pt.trace.json" in census.rank_count_matches.message


def test_declared_four_found_eight(tmp_path: Path) -> None:
    census, _ = census_of(write_kineto_set(tmp_path, list(range(8)), 8), 4)
    assert census.ranks_unexpected == (4, 5, 6, 7)
    assert not census.rank_count_matches.passed
    message = census.rank_count_matches.message
    assert (
        "ranks 4..7 are outside 0..3 for the declared rank count 4, in trace_4.pt.trace.json, "
        "trace_5.pt.trace.json, trace_6.pt.trace.json, trace_7.pt.trace.json;"
    ) in message
    assert "world_size 8 recorded by trace_0.pt.trace.json" in message
    assert "declared rank count 4" in message


def test_parallelism_product_disagreeing_with_the_ranks(tmp_path: Path) -> None:
    metadata = {"parallelism": {"dp": 2, "tp": 2, "cp": 4}, "shape": {"rankCount": 8}}
    census, _ = census_of(write_kineto_set(tmp_path, list(range(8)), 8), 8, metadata)
    assert census.parallelism_product == 4
    check = census.parallelism_consistent
    assert not check.passed
    assert "parallelism product 4 (dp 2 × tp 2) differs from the declared rank count 8" in (
        check.message
    )
    assert "world_size 8 in trace_0.pt.trace.json" in check.message
    chakra = write_chakra_set(tmp_path, "ar", range(4))
    ranks_only, _ = census_of(chakra, None, {"parallelism": {"pp": 2}})
    assert not ranks_only.parallelism_consistent.passed
    assert "the 4 ranks the files evidence (highest rank 3 in ar.3.et)" in (
        ranks_only.parallelism_consistent.message
    )


def test_two_unrelated_chakra_prefixes(tmp_path: Path) -> None:
    paths = write_chakra_set(tmp_path, "all_reduce", range(4))
    paths += write_chakra_set(tmp_path, "all_gather", range(4))
    census, _ = census_of(paths, 4)
    assert census.chakra_prefixes == {"all_gather": (0, 1, 2, 3), "all_reduce": (0, 1, 2, 3)}
    assert not census.rank_count_matches.passed
    assert (
        "2 unrelated Chakra prefixes: all_gather (ranks 0..3); all_reduce (ranks 0..3)"
        in census.rank_count_matches.message
    )


# --- plain data ------------------------------------------------------------------------


def test_single_primary_file_covers_every_declared_rank() -> None:
    files = [("model.bin", FileInspection(name="model.bin"))]
    census = rank_census(files, declared_rank_count=256, workload_metadata={})
    assert census.rank_ranges == {"model.bin": RankRange(0, 255)}
    assert census.rank_count_matches.passed
    assert "taken to hold all 256 declared ranks" in census.rank_count_matches.message
    assert census.unranked_files == ("model.bin",)


def test_no_files_and_no_declaration() -> None:
    census = rank_census([], declared_rank_count=None, workload_metadata=None)
    assert census.rank_count_matches.passed
    assert census.expected_rank_count is None
    assert census.to_json()["checks"]["parallelismConsistent"]["passed"] is True


def test_huge_declared_count_stays_small() -> None:
    files = [(f"r{r}.json", fake(f"r{r}.json", r)) for r in (0, 5)]
    census = rank_census(files, declared_rank_count=2_147_483_647, workload_metadata=None)
    assert census.ranks_missing == (RankRange(1, 4), RankRange(6, 2_147_483_646))
    assert census.missing_count == 2_147_483_645
    assert len(census.rank_count_matches.message) < 400


def test_disagreeing_world_sizes_without_declaration() -> None:
    files = [("a", fake("a", 0, 2)), ("b", fake("b", 1, 4))]
    census = rank_census(files, declared_rank_count=None, workload_metadata=None)
    assert census.expected_rank_count is None
    assert census.world_sizes == {2: ("a",), 4: ("b",)}
    assert census.rank_count_matches.message == "the files disagree on world_size: 2 in a; 4 in b"


def test_long_file_lists_are_capped() -> None:
    files = [(f"f{i}.json", fake(f"f{i}.json", 0)) for i in range(40)]
    census = rank_census(files, declared_rank_count=1, workload_metadata=None)
    assert "rank 0 is recorded by 40 files: f0.json, f1.json" in census.rank_count_matches.message
    assert "and 35 more" in census.rank_count_matches.message


@pytest.mark.parametrize(
    ("metadata", "product"),
    [
        (None, None),
        ([], None),
        ({"parallelism": None}, None),
        ({"parallelism": {"cp": 2, "fsdp": 2}}, None),
        ({"parallelism": {"dp": True, "tp": 2.0, "pp": 2}}, 2),
        ({"parallelism": {"dp": 2, "tp": 4, "sp": 1, "ep": 2, "pp": 2}}, 32),
    ],
)
def test_parallelism_product(metadata: object, product: int | None) -> None:
    census = rank_census([], declared_rank_count=None, workload_metadata=metadata)
    assert census.parallelism_product == product


def test_archive_with_a_hole_has_no_single_range() -> None:
    members = (fake("r0.json", 0), fake("r2.json", 2))
    archive = FileInspection(name="t.zip", format="zip", members=members)
    other = fake("r1.json", 1)
    census = rank_census(
        [("t.zip", archive), ("r1.json", other)], declared_rank_count=3, workload_metadata=None
    )
    assert census.rank_ranges == {"t.zip": None, "r1.json": RankRange(1, 1)}
    assert census.rank_count_matches.passed


def test_one_rank_outside_the_declared_range() -> None:
    files = [(f"r{r}.json", fake(f"r{r}.json", r)) for r in (0, 1, 9)]
    census = rank_census(files, declared_rank_count=2, workload_metadata=None)
    assert census.ranks_unexpected == (9,)
    assert census.rank_count_matches.message == (
        "rank 9 (r9.json) is outside 0..1 for the declared rank count 2"
    )


def test_many_duplicated_ranks_are_summarised() -> None:
    files = [(f"{c}{r}.json", fake(f"{c}{r}.json", r)) for c in "ab" for r in range(8)]
    census = rank_census(files, declared_rank_count=8, workload_metadata=None)
    assert len(census.duplicated) == 8
    message = census.rank_count_matches.message
    assert message.count("is recorded by 2 files") == 5
    assert "3 more ranks are duplicated" in message


def test_archive_without_ranked_traces_is_unranked() -> None:
    readme = FileInspection(name="README.md")
    archive = FileInspection(name="docs.zip", format="zip", members=(readme,))
    files = [("docs.zip", archive), ("r0.json", fake("r0.json", 0, 1))]
    census = rank_census(files, declared_rank_count=1, workload_metadata=None)
    assert census.unranked_files == ("docs.zip",)
    assert census.rank_ranges == {"docs.zip": None, "r0.json": RankRange(0, 0)}
    assert census.rank_count_matches.passed


# --- the one-unranked-file rule --------------------------------------------------------


def test_a_single_unranked_file_recording_its_world_size_is_one_rank_not_all() -> None:
    # An execution trace whose rows are only waits: world size from the pg node, no rank.
    trace = FileInspection(name="host.json", format="pytorch_et_json", world_size=2)
    census = rank_census([("host.json", trace)], declared_rank_count=2, workload_metadata=None)
    assert not census.rank_count_matches.passed
    assert census.rank_count_matches.message.startswith(
        "host.json records world_size 2 but no rank: it is one rank's trace, not a file "
        "holding all 2 declared ranks; 2 of 2 ranks missing: 0..1"
    )
    # The only primary file's rankRange is the declared range whatever it holds.
    assert census.rank_ranges == {"host.json": RankRange(0, 1)}


def test_a_single_unranked_kineto_file_of_world_size_two_fails(tmp_path: Path) -> None:
    path = tmp_path / "only.pt.trace.json"
    path.write_bytes(kineto_trace(None, 2))
    census, _ = census_of([path], 2)
    assert not census.rank_count_matches.passed
    assert "only.pt.trace.json records world_size 2 but no rank" in (
        census.rank_count_matches.message
    )


def test_a_single_file_without_world_size_still_holds_every_rank() -> None:
    trace = FileInspection(name="merged.json", format="pytorch_et_json")
    census = rank_census([("merged.json", trace)], declared_rank_count=4, workload_metadata=None)
    assert census.rank_count_matches.passed, census.rank_count_matches.message
    assert census.rank_ranges == {"merged.json": RankRange(0, 3)}


def test_an_archive_of_eight_unranked_traces_is_not_one_file_of_four_ranks() -> None:
    members = tuple(
        FileInspection(name=f"host_{i}.json", format="pytorch_et_json") for i in range(8)
    )
    archive = FileInspection(name="ets.tar", format="tar", members=members)
    census = rank_census([("ets.tar", archive)], declared_rank_count=4, workload_metadata=None)
    assert not census.rank_count_matches.passed
    assert census.rank_count_matches.message.startswith(
        "ets.tar holds 8 trace files, each one rank's, not one file holding all 4 declared "
        "ranks, and none records its rank"
    )


def test_an_archive_of_eight_ranked_members_fails_four_declared(tmp_path: Path) -> None:
    archive = tmp_path / "set.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for rank in range(8):
            out.writestr(f"trace/ar.{rank}.et", chakra_trace(chakra_allreduce()))
    census, _ = census_of([archive], 4)
    assert census.ranks_found == tuple(range(8))
    assert not census.rank_count_matches.passed
    assert "ranks 4..7 are outside 0..3 for the declared rank count 4" in (
        census.rank_count_matches.message
    )


def test_an_archive_holding_one_opaque_trace_and_a_readme_holds_every_rank() -> None:
    members = (FileInspection(name="README.md"), FileInspection(name="all.json", format="unknown"))
    archive = FileInspection(name="run.zip", format="zip", members=members)
    census = rank_census([("run.zip", archive)], declared_rank_count=4, workload_metadata=None)
    assert census.rank_count_matches.passed, census.rank_count_matches.message


def test_a_single_ranked_file_of_eight_declared_misses_seven() -> None:
    census = rank_census(
        [("r3.json", fake("r3.json", 3, 8))], declared_rank_count=8, workload_metadata=None
    )
    assert not census.rank_count_matches.passed
    assert "7 of 8 ranks missing: 0..2, 4..7" in census.rank_count_matches.message


def test_two_jsonized_chakra_jobs_are_not_one_traceset() -> None:
    directory = TESTDATA / "chakra-json-stg-jsonized"
    census, _ = census_of(sorted(directory.iterdir()), None)
    assert census.chakra_prefixes == {"j0": (0,), "j1": (0,)}
    assert census.duplicated == {0: ("j0_0.json", "j1_0.json")}
    assert not census.rank_count_matches.passed
    assert "2 unrelated Chakra prefixes" in census.rank_count_matches.message


# --- issue 41: the census is linear (or n log n) in the files --------------------------------

MANY = 300_000


@pytest.mark.slow
@pytest.mark.timeout(60)  # a hang guard: the quadratic census took many minutes here
def test_many_files_of_one_rank_are_counted_in_work_linear_in_them() -> None:
    """300,000 rank-0 files (as in a tar of 300,000 identical members) and 20,000 archives
    whose members all hold rank 0, each file recording the same process group: the duplicate
    check, the groups' files and each archive's provenance once per file, not per pair."""
    group = ProcessGroup(name="0", size=2, ranks=(0, 1))
    trace = replace(fake("r0.json", 0, 2), process_groups=(group,))
    files = [(f"r{i}.json", trace) for i in range(MANY)]
    archive = FileInspection(name="a.zip", format="zip", members=(trace,))
    files += [(f"a{i}.zip", archive) for i in range(20_000)]
    census = rank_census(files, declared_rank_count=2, workload_metadata={"parallelism": {"tp": 2}})
    assert list(census.duplicated) == [0] and len(census.duplicated[0]) == MANY + 20_000
    message = census.rank_count_matches.message
    assert message.startswith(f"rank 0 is recorded by {MANY + 20_000} files: r0.json, r1.json")
    assert census.process_groups[0].files[:2] == ("r0.json", "r1.json")
    assert len(census.process_groups[0].files) == MANY + 20_000
    assert census.rank_provenance["a7.zip"] == "1 ranked members: r0.json: distributedInfo"
