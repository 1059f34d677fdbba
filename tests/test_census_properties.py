"""Property test (hypothesis) of issue 41's rule for the census: the work and the output of
every check that reads a declared rank count or degree grow with the files, never with the
number declared.

Arbitrary declarations (``shape.rankCount``, the degrees ``dp tp sp ep pp cp``, each anywhere
in 1..2³¹−1, the bounds most often) against 0–8 small synthetic files (traces of each kind,
ranked or not, with ranks, world sizes and process groups up to the same bound; archives of
some): the census, the readiness checks, the summary, its facts and the command line's text
of the census are computed inside ``bounded_memory`` (a runaway list of ranks is a
MemoryError at once), their heap's peak stays under a few MiB and the JSON and text they give
under sizes fixed by the files alone. Fixed seed: the same cases every run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.bounded import bounded_memory
from tracestore.cli.inspect import census_lines
from tracestore.inspect import FileInspection, ProcessGroup, rank_census
from tracestore.inspect.groups import process_group_check
from tracestore.inspect.readiness import readiness
from tracestore.inspect.summary import search_facts, traceset_summary
from tracestore.metadata import MAX_RANK_COUNT

pytestmark = pytest.mark.slow  # hypothesis: 400 cases under a memory bound

BOUND = MAX_RANK_COUNT
# Counts and degrees: the bounds and their neighbours often, anything in 1..2³¹−1 otherwise.
counts = st.one_of(st.sampled_from([1, 2, 3, 4, 8, 2**30, BOUND - 1, BOUND]), st.integers(1, BOUND))
ranks = st.one_of(st.integers(0, 9), st.sampled_from([BOUND - 2, BOUND - 1]), st.integers(0, BOUND))
groups = st.builds(
    ProcessGroup,
    name=st.sampled_from(["0", "1", "2", None]),
    size=st.one_of(st.none(), counts),
    ranks=st.one_of(st.none(), st.lists(ranks, min_size=1, max_size=8).map(tuple)),
    collectives=st.sampled_from([{}, {"all_reduce": 2}]),
)
FORMATS = ["kineto_json", "pytorch_et_json", "chakra_et", "chakra_json", "comm_groups", "unknown"]


@st.composite
def traces(draw: st.DrawFn) -> FileInspection:
    """One trace file's inspection, as the inspectors would give it."""
    fmt = draw(st.sampled_from(FORMATS))
    rank = draw(st.one_of(st.none(), ranks))
    named = draw(st.sampled_from([None, 0, 1, BOUND - 1]))
    name = f"job.{named}.et" if fmt == "chakra_et" and named is not None else f"{fmt}.json"
    failed = draw(st.booleans())
    return FileInspection(
        name=name,
        format=fmt,  # type: ignore[arg-type]
        status="failed" if failed else "complete",
        reason="truncated" if failed else None,
        rank=rank,
        world_size=draw(st.one_of(st.none(), counts)),
        rank_source="distributedInfo" if rank is not None else None,
        pid=draw(st.one_of(st.none(), st.integers(1, 3))),
        process_groups=tuple(draw(st.lists(groups, max_size=3))),
        bytes_scanned=draw(st.integers(0, 2 * 1024**3)),
        gpu_models=tuple(draw(st.lists(st.sampled_from(["H100", "A100 80GB"]), max_size=2))),
        backend=draw(st.sampled_from([None, "nccl", "gloo"])),
    )


archives = st.builds(
    FileInspection,
    name=st.just("set.zip"),
    format=st.just("zip"),
    members=st.lists(traces(), max_size=3).map(tuple),
)
files = st.lists(st.one_of(traces(), archives), max_size=8).map(
    lambda found: [(f"{i}-{f.name}", f) for i, f in enumerate(found)]
)
degrees = st.dictionaries(st.sampled_from(["dp", "tp", "sp", "ep", "pp", "cp"]), counts)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "shape": st.fixed_dictionaries({"rankCount": counts}),
        "parallelism": degrees,
    },
)

MAX_PEAK_MIB = 2
MAX_CENSUS_JSON = 32 * 1024  # 8 files of up to 3 members each, named a few times each
MAX_TEXT = 16 * 1024
MAX_READINESS_JSON = 4 * 1024


@seed(41)
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    found=files,
    declared=st.one_of(st.none(), counts),
    workload=metadata,
    world=st.one_of(st.none(), counts),
)
def test_declared_numbers_never_set_the_work_or_the_output(
    found: list[tuple[str, FileInspection]],
    declared: int | None,
    workload: dict[str, Any],
    world: int | None,
) -> None:
    with bounded_memory(256) as peak:
        census = rank_census(found, declared_rank_count=declared, workload_metadata=workload)
        ready = json.dumps(readiness(found, census))
        summary = traceset_summary(found, census)
        facts = search_facts(summary)
        census_json = json.dumps(census.to_json())
        text = "\n".join(census_lines(census))
        direct = process_group_check(
            census.process_groups, workload, world_size=world, ranks_found=len(found)
        )
    assert peak.mib < MAX_PEAK_MIB, f"{peak.mib:.1f} MiB for {declared=} {workload=}"
    assert len(census_json) < MAX_CENSUS_JSON
    assert len(text) < MAX_TEXT
    assert len(ready) < MAX_READINESS_JSON
    assert len(direct.message) < MAX_TEXT
    assert len(facts) < 200

    # The ranks missing are runs between the ranks found: as many as those, plus one.
    expected = census.expected_rank_count or 0
    inside = [r for r in census.ranks_found if r < expected]
    assert len(census.ranks_missing) <= len(inside) + 1
    assert census.missing_count == expected - len(inside)
    bounds = [(r.start, r.end) for r in census.ranks_missing]
    assert bounds == sorted(bounds) and all(0 <= a <= b < expected for a, b in bounds)
