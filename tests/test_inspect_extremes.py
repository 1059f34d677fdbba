"""Inspection at the extremes (issue 41): bombs of every compression kind are read only as
far as the file's stored size allows, in bounded memory; archives of very many members are
counted past the cap, not inspected; numbers a double or a 64-bit column cannot hold fail
their file alone, with the reason, and never reach the JSON."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import crafted
from tests.support.inspect_fixtures import inspect_in_child
from tracestore.inspect import FileInspection, inspect_file, rank_census
from tracestore.inspect.model import Draft, ProcessGroup, TimeSpan
from tracestore.inspect.streams import DEFAULT_LIMITS, Limits

pytestmark = pytest.mark.slow  # bombs read in child processes

MIB = crafted.MIB
LIMIT = "inspection stopped after"


def _in_child(path: Path) -> dict[str, Any]:
    return inspect_in_child(path, timeout=120)


def _inspect(data: bytes, name: str, limits: Limits = DEFAULT_LIMITS) -> FileInspection:
    return inspect_file(lambda: io.BytesIO(data), name, limits=limits, stored_size=len(data))


def test_a_bzip2_zip_bomb_is_read_as_far_as_its_size_allows_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """The issue's ZIP: a bzip2 member of spaces. zipfile unpacked its input whole (and
    copied it once more): 256 MiB of spaces cost 530 MiB, 2 GiB cost 4 GiB."""
    path = tmp_path / "bomb.zip"
    path.write_bytes(crafted.zip_bomb("bzip2", 256 * MIB))
    assert path.stat().st_size < 2048
    report = _in_child(path)
    assert report["peakMib"] < 100, f"peak RSS {report['peakMib']:.0f} MiB"
    (member,) = report["inspection"]["members"]
    assert member["status"] == "failed"
    assert member["reason"].startswith(LIMIT), member["reason"]
    assert "times its" in member["reason"]
    assert (member["format"], member["rank"]) == ("kineto_json", 0)  # what was read is kept


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("deflate.zip", lambda: crafted.zip_bomb("deflate", 64 * MIB)),
        ("bzip2.zip", lambda: crafted.zip_bomb("bzip2", 64 * MIB)),
        ("lzma.zip", lambda: crafted.zip_bomb("lzma", 64 * MIB)),
        ("t.tar.gz", lambda: crafted.tar_bomb("gzip", 64 * MIB)),
        ("t.tar.zst", lambda: crafted.tar_bomb("zstd", 64 * MIB)),
        ("t.tar.bz2", lambda: crafted.tar_bomb("bzip2", 64 * MIB)),
        ("t.tar.xz", lambda: crafted.tar_bomb("xz", 64 * MIB)),
    ],
)
def test_an_archive_bomb_of_each_kind_stops_at_the_budget(name: str, make: Any) -> None:
    result = _inspect(make(), name)
    (member,) = result.members
    assert member.status == "failed" and member.reason is not None
    assert member.reason.startswith(LIMIT), member.reason
    assert (member.format, member.rank) == ("kineto_json", 0)
    # Every decompressed byte counts: the member's, and a tar stream's around it.
    assert result.bytes_scanned <= Limits().budget(len(make())).limit * 2


@pytest.mark.parametrize(
    ("kind", "spaces"), [("gzip", False), ("zstd", False), ("bzip2", True), ("xz", False)]
)
def test_a_compressed_trace_bomb_stops_at_the_budget_with_what_it_read(
    kind: str, spaces: bool
) -> None:
    """The issue's zstd file held completion 99 s unpacking 32 GiB of Kineto events."""
    data = crafted.stream_bomb(kind, 64 * MIB, spaces)
    result = _inspect(data, f"rank0.json.{kind}")
    assert (result.format, result.compression, result.status) == ("kineto_json", kind, "failed")
    assert result.reason is not None and result.reason.startswith(LIMIT), result.reason
    assert result.rank == 0
    assert result.bytes_scanned <= Limits().budget(len(data)).limit + 4 * MIB


def test_the_budget_is_the_absolute_cap_for_a_large_file() -> None:
    data = crafted.stream_bomb("zstd", 16 * MIB)
    result = _inspect(data, "rank0.json.zst", Limits(unpacked=2 * MIB, expansion=10**6))
    assert result.reason == (
        "inspection stopped after 2,097,152 decompressed bytes, the limit for this file "
        "(at most 2,097,152 per file)"
    )


def test_a_bzip2_and_an_xz_trace_are_read_whole_within_the_budget() -> None:
    raw = crafted.kineto_trace(1)
    for kind in ("bzip2", "xz"):
        result = _inspect(crafted.compress(iter([raw]), kind), f"r1.json.{kind}")
        assert (result.status, result.compression, result.rank) == ("complete", kind, 1)


def test_a_huge_pax_header_is_refused_not_read_whole() -> None:
    result = _inspect(crafted.pax_bomb(64 * MIB), "pax.tar.gz", Limits(expansion=10_000))
    assert result.status == "failed"
    assert result.reason is not None
    assert "an extended header (long name or pax record) of 67,108,864 bytes" in result.reason


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("many.tar.gz", lambda: crafted.many_members_tar_gz(2_000)),
        ("many.zip", lambda: crafted.many_members_zip(2_000)),
    ],
)
def test_members_past_the_cap_are_counted_not_inspected(name: str, make: Any) -> None:
    result = _inspect(make(), name, Limits(members=150))
    assert len(result.members) == 150
    assert result.status == "failed"
    assert result.reason == (
        "inspected the first 150 members; 1,850 more were skipped (the limit of members "
        "inspected per archive)"
    )


def test_a_zip_is_read_without_zipfile_s_whole_directory(tmp_path: Path) -> None:
    """zipfile builds an object per entry of the central directory before the first
    member; 200,000 entries walked one at a time stay small."""
    path = tmp_path / "many.zip"
    path.write_bytes(crafted.many_members_zip(200_000))
    report = _in_child(path)
    assert report["peakMib"] < 100, f"peak RSS {report['peakMib']:.0f} MiB"
    assert len(report["inspection"]["members"]) == 10_000
    assert "190,000 more were skipped" in report["inspection"]["reason"]


def test_an_unclosed_object_of_blanks_is_bounded(tmp_path: Path) -> None:
    """A distributedInfo that never ends: held until MAX_OBJECT, whose decoding costs
    several copies (408 MiB at 64 MiB; now 16 MiB)."""
    path = tmp_path / "blank.json"
    with path.open("wb") as out:
        out.write(b'{"schemaVersion": 1, "distributedInfo": {"rank": ')
        for _ in range(100):
            out.write(b" " * MIB)
    report = _in_child(path)
    assert report["peakMib"] < 160, f"peak RSS {report['peakMib']:.0f} MiB"
    assert report["inspection"]["reason"].startswith("malformed: no object boundary within")


def _strict(value: Any) -> Any:
    """``value`` through JSON that refuses NaN and Infinity."""
    return json.loads(json.dumps(value, allow_nan=False))


def test_an_event_time_past_a_double_fails_the_file_not_the_json() -> None:
    result = _inspect(crafted.nonfinite_kineto(1), "far.json")
    assert (result.status, result.rank, result.time_span) == ("failed", 1, None)
    assert result.reason is not None
    assert "the time span (10 to inf us) is not finite within ±2^63 us" in result.reason
    _strict(result.to_json())


def test_times_whose_duration_would_overflow_are_left_out() -> None:
    events = b'{"ph": "X", "name": "a", "ts": -1.7e308, "dur": 1},'
    events += b'{"ph": "X", "name": "b", "ts": 1.7e308, "dur": 1},'
    result = _inspect(crafted.kineto_trace(0, events), "wide.json")
    assert result.time_span is None and result.status == "failed"
    _strict(result.to_json())


def test_a_rank_past_64_bits_fails_its_file_alone() -> None:
    huge = _inspect(crafted.huge_rank_kineto(), "huge.json")
    assert (huge.status, huge.rank, huge.world_size, huge.rank_source) == (
        "failed",
        None,
        None,
        None,
    )
    assert huge.reason is not None
    assert huge.reason.startswith(
        "distributedInfo rank 1000000000000000000000000000000 is out of range (0 to "
        "2,147,483,646): left out; world_size 1000000000000000000000000000001 is out of range"
    )
    assert huge.process_groups == (ProcessGroup(name="0", size=None, ranks=None),)
    fine = _inspect(crafted.kineto_trace(1), "fine.json")
    found = [("huge.json", huge), ("fine.json", fine)]
    census = rank_census(found, declared_rank_count=2, workload_metadata=None)
    assert list(census.ranks_found) == [1]
    _strict(census.to_json())


def test_a_pid_past_64_bits_is_left_out() -> None:
    result = _inspect(crafted.huge_pid_et(), "et.json")
    assert result.pid is None and result.status == "failed"
    assert result.reason == "pid 1000000000000000019884624838656 is out of range: left out"


def test_a_non_finite_attribute_is_given_by_its_name() -> None:
    draft = Draft(name="c.et", attributes={"a": math.inf, "b": -math.inf, "c": math.nan, "d": 1.5})
    frozen = draft.freeze()
    assert frozen.status == "complete"
    assert dict(frozen.attributes) == {"a": "Infinity", "b": "-Infinity", "c": "NaN", "d": 1.5}


def test_a_huge_integer_in_json_fails_the_file_not_the_process() -> None:
    digits = b"9" * 5000  # past int's 4300 digits
    result = _inspect(b'{"distributedInfo": {"rank": ' + digits + b"}}", "d.json")
    assert result.status == "failed"
    assert result.reason is not None
    assert re.match(r"malformed JSON at byte \d+: Exceeds the limit", result.reason)


def test_a_span_within_range_is_kept() -> None:
    draft = Draft(name="k.json", time_span=TimeSpan(-(2**62), 2**62))
    assert draft.freeze().time_span == TimeSpan(-(2**62), 2**62)


def test_the_inspectors_rank_bound_is_the_seeds() -> None:
    from tracestore import metadata
    from tracestore.inspect import model

    assert model.MAX_RANK_COUNT == metadata.MAX_RANK_COUNT
