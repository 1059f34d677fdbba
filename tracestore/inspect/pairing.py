"""Per rank, which traces a traceset holds: a Kineto timeline and an execution trace of the
same process are two halves of one rank, not a duplicate.

Halves are paired by rank, and by process id where both record one: an unranked half takes
the rank of the half that shares its pid (unique pids only: pids repeat across hosts), and
a pair whose ranks or pids disagree is a problem the census reports. Chakra traces are a
kind of their own (converted from such a pair), never paired.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tracestore.inspect.census_text import describe_files
from tracestore.inspect.model import FileInspection

KINETO, EXECUTION_TRACE, CHAKRA = "kineto", "executionTrace", "chakra"
KINDS = {
    "kineto_json": KINETO,
    "pytorch_et_json": EXECUTION_TRACE,
    "chakra_et": CHAKRA,
    "chakra_json": CHAKRA,
}
_SPOKEN = {KINETO: "Kineto trace", EXECUTION_TRACE: "execution trace", CHAKRA: "Chakra trace"}
MAX_PROBLEMS_SHOWN = 5


@dataclass(frozen=True)
class RankedFile:
    """One trace file (or archive member) and the rank it holds, with where that came from."""

    file: str
    kind: str
    rank: int | None
    rank_source: str | None
    rank_provenance: str | None
    pid: int | None

    def to_json(self) -> dict[str, Any]:
        """``{"file", "kind", "rankSource", "rankProvenance", "pid"}``."""
        return {
            "file": self.file,
            "kind": self.kind,
            "rankSource": self.rank_source,
            "rankProvenance": self.rank_provenance,
            "pid": self.pid,
        }


@dataclass(frozen=True)
class RankEntry:
    """A rank and the files that hold it."""

    rank: int
    files: tuple[RankedFile, ...]

    @property
    def halves(self) -> tuple[str, ...]:
        """The kinds of trace present for the rank (``kineto``, ``executionTrace``, ...)."""
        return tuple(sorted({f.kind for f in self.files}))

    def to_json(self) -> dict[str, Any]:
        """``{"rank", "halves", "files"}``."""
        return {
            "rank": self.rank,
            "halves": list(self.halves),
            "files": [f.to_json() for f in self.files],
        }


@dataclass
class Pairing:
    """Ranked files by rank, the unranked ones, and the problems pairing found."""

    by_rank: dict[int, list[RankedFile]] = field(default_factory=dict)
    unranked: list[RankedFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def entries(self) -> tuple[RankEntry, ...]:
        """Every rank found, in order."""
        return tuple(RankEntry(r, tuple(fs)) for r, fs in sorted(self.by_rank.items()))

    def duplicated(self) -> dict[int, tuple[str, ...]]:
        """Ranks held by more than one file of the same kind."""
        found: dict[int, tuple[str, ...]] = {}
        for rank, files in sorted(self.by_rank.items()):
            kinds = Counter(f.kind for f in files)
            if any(count > 1 for count in kinds.values()):
                found[rank] = tuple(f.file for f in files if kinds[f.kind] > 1)
        return found


def ranked_file(label: str, inspection: FileInspection) -> RankedFile:
    """The census's view of one trace."""
    return RankedFile(
        file=label,
        kind=KINDS.get(inspection.format, inspection.format),
        rank=inspection.rank,
        rank_source=inspection.rank_source,
        rank_provenance=inspection.rank_provenance,
        pid=inspection.pid,
    )


def pair(files: Sequence[RankedFile]) -> Pairing:
    """Group ``files`` by rank, giving unranked halves the rank of their pid's partner."""
    problems: list[str] = []
    files = _ranks_by_pid(list(files), problems)
    result = Pairing(problems=problems)
    for item in files:
        if item.rank is None:
            result.unranked.append(item)
        else:
            result.by_rank.setdefault(item.rank, []).append(item)
    _check_pairs(result)
    return result


def _unique_pids(files: Sequence[RankedFile], kind: str) -> dict[int, RankedFile]:
    seen: dict[int, list[RankedFile]] = {}
    for item in files:
        if item.kind == kind and item.pid is not None:
            seen.setdefault(item.pid, []).append(item)
    return {pid: items[0] for pid, items in seen.items() if len(items) == 1}


def _ranks_by_pid(files: list[RankedFile], problems: list[str]) -> list[RankedFile]:
    kineto, traces = _unique_pids(files, KINETO), _unique_pids(files, EXECUTION_TRACE)
    adopted: dict[str, RankedFile] = {}
    for pid in sorted(kineto.keys() & traces.keys()):
        timeline, trace = kineto[pid], traces[pid]
        if timeline.rank is not None and trace.rank is not None:
            if timeline.rank != trace.rank:
                problems.append(
                    f"{timeline.file} (Kineto, rank {timeline.rank}) and {trace.file} "
                    f"(execution trace, rank {trace.rank}) share pid {pid} but their ranks "
                    "disagree"
                )
            continue
        ranked, unranked = (timeline, trace) if timeline.rank is not None else (trace, timeline)
        if ranked.rank is None:
            continue
        adopted[unranked.file] = replace(
            unranked,
            rank=ranked.rank,
            rank_source="pid",
            rank_provenance=(
                f"pid {pid}, shared with {ranked.file} whose rank {ranked.rank} comes from "
                f"{ranked.rank_provenance or ranked.rank_source}"
            ),
        )
    return [adopted.get(item.file, item) for item in files]


def _check_pairs(result: Pairing) -> None:
    """Pids that disagree within a rank's pair, and ranks missing a half of a paired set."""
    kinds_present = {f.kind for files in result.by_rank.values() for f in files}
    paired_set = {KINETO, EXECUTION_TRACE} <= kinds_present
    half_missing: dict[str, list[int]] = {}
    for rank, files in sorted(result.by_rank.items()):
        timelines = [f for f in files if f.kind == KINETO]
        traces = [f for f in files if f.kind == EXECUTION_TRACE]
        if len(timelines) == 1 and len(traces) == 1:
            timeline, trace = timelines[0], traces[0]
            if timeline.pid is not None and trace.pid is not None and timeline.pid != trace.pid:
                result.problems.append(
                    f"rank {rank}: {timeline.file} (Kineto, pid {timeline.pid}) and "
                    f"{trace.file} (execution trace, pid {trace.pid}) disagree on the pid"
                )
        elif paired_set and bool(timelines) != bool(traces):
            missing = EXECUTION_TRACE if timelines else KINETO
            half_missing.setdefault(missing, []).append(rank)
    for missing, ranks in sorted(half_missing.items()):
        have = _SPOKEN[KINETO if missing == EXECUTION_TRACE else EXECUTION_TRACE]
        shown = ", ".join(map(str, ranks[:MAX_PROBLEMS_SHOWN]))
        more = f" and {len(ranks) - MAX_PROBLEMS_SHOWN} more" if len(ranks) > 5 else ""
        holders = [f.file for r in ranks for f in result.by_rank[r]]
        result.problems.append(
            f"no {_SPOKEN[missing]} for rank{'s' if len(ranks) > 1 else ''} {shown}{more}, "
            f"which {'have' if len(ranks) > 1 else 'has'} a {have} "
            f"({describe_files(holders)})"
        )
