"""The comparison of two tracesets (ANALYTICS.md, "Comparison of two tracesets"): pure.

Each side is a list of ranks (``RankSide``), built from a ``RankAnalysis`` (local files) or
from what the service stored (the analysis's JSON and its detail: per-step kernel totals,
and the totals of kernels launched in no step). ``pair_ranks`` chooses which ranks meet
which; ``Comparison`` adds up each pair's kernels, one rank at a time (what it holds grows
with the distinct kernel names, not with the ranks or steps), and answers the API's object.

A kernel counts when it was launched inside a chosen step (a file without steps: every
counted kernel), as HTA's ``TraceDiff`` assigns a kernel to the iteration its launch lies
in. Names are compared whatever their kind, as HTA does; counts and durations add up over
the chosen ranks of a side.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracestore.analysis.model import Overlap, RankAnalysis, Temporal, us
from tracestore.errors import Conflict, ValidationError
from tracestore.ranks import Runs, overlaps, ranks_text

NAME_SETS = ("added", "deleted", "increased", "decreased", "unchanged")
# (step, name, calls, ns) rows; step -1: launched in no step
KernelRows = Iterable[tuple[int, str, int, int]]


class _Rows:
    """Rows read again on each iteration (a side may be compared more than once)."""

    def __init__(self, make: Callable[[], Iterator[tuple[int, str, int, int]]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[tuple[int, str, int, int]]:
        return self._make()


@dataclass
class RankSide:
    """One rank of one side: what the comparison reads of its analysis (times in ns)."""

    rank: int | None
    file: str
    temporal: Temporal
    overlap: Overlap
    steps: list[tuple[int, int, bool]]  # (number, duration, truncated)
    kernels: KernelRows = field(default_factory=list)  # (step, name, calls, ns); -1: none

    def in_steps(self, chosen: Runs | None) -> list[tuple[int, int, bool]]:
        """The steps of ``chosen`` (None: all) this rank holds."""
        return [s for s in self.steps if chosen is None or overlaps(chosen, s[0], s[0])]


def side_of(rank: int | None, file: str, analysis: RankAnalysis) -> RankSide:
    """A rank's side from its analysis (local files)."""

    def rows() -> Iterator[tuple[int, str, int, int]]:
        for table in (analysis.step_kernels, analysis.unstepped_kernels):
            names = table.names
            yield from (
                (step, names[name], count, duration)
                for step, name, count, duration in zip(
                    table.steps, table.name_ids, table.counts, table.durations, strict=True
                )
            )

    steps = [(s.number, s.duration_ns, s.truncated) for s in analysis.steps]
    return RankSide(rank, file, analysis.temporal, analysis.overlap, steps, _Rows(rows))


def _ns(value: int | float) -> int:
    return value * 1000 if isinstance(value, int) else round(value * 1000)


def stored_side(
    rank: int | None, file: str, analysis: dict[str, Any], detail: dict[str, Any]
) -> RankSide:
    """A rank's side from what the service stored: the analysis's JSON (``temporal``,
    ``overlap``, ``steps``) and its detail (``RankAnalysis.detail_text``)."""
    t, o = analysis["temporal"], analysis["overlap"]
    temporal = Temporal(_ns(t["kernelTimeUs"]), _ns(t["idleTimeUs"]), _ns(t["computeTimeUs"]))
    overlap = Overlap(_ns(o["communicationTimeUs"]), _ns(o["overlapTimeUs"]))
    steps = [(s["step"], _ns(s["durationUs"]), s["truncated"]) for s in analysis["steps"]]
    names = detail["names"]
    per_step = detail["stepKernels"]
    outside = detail.get("unstepped")
    if outside is None and not steps:
        raise Conflict(
            f"{file} was analysed before the service kept the totals of kernels outside "
            "steps: compare it locally (tracestore compare PATH PATH)"
        )
    outside = outside or {"name": [], "calls": [], "durationNs": []}

    def rows() -> Iterator[tuple[int, str, int, int]]:
        stepped = (per_step["step"], per_step["name"], per_step["calls"], per_step["durationNs"])
        for step, name, calls, duration in zip(*stepped, strict=True):
            yield step, names[name], calls, duration
        unstepped = (outside["name"], outside["calls"], outside["durationNs"])
        for name, calls, duration in zip(*unstepped, strict=True):
            yield -1, names[name], calls, duration

    return RankSide(rank, file, temporal, overlap, steps, _Rows(rows))


def pair_ranks(
    base: Sequence[int | None],
    other: Sequence[int | None],
    base_ranks: Runs | None = None,
    other_ranks: Runs | None = None,
) -> list[tuple[int, int]]:
    """Which rank of ``base`` meets which of ``other`` (indexes into them, in rank order).

    With no selection: the ranks both hold, or, when each side holds one rank, those two. A
    selection given for one side only is taken for both. The chosen ranks meet in order, so
    both sides must choose as many. Conflict when there is nothing to compare,
    ValidationError when the selections choose no rank or different numbers of them.
    """
    base_ranks = base_ranks or other_ranks
    other_ranks = other_ranks or base_ranks
    if base_ranks is None or other_ranks is None:
        if len(base) == 1 and len(other) == 1:
            return [(0, 0)]
        index = {rank: i for i, rank in enumerate(other) if rank is not None}
        pairs = sorted(
            ((rank, i, index[rank]) for i, rank in enumerate(base) if rank in index),
            key=lambda p: p[0],
        )
        if not pairs:
            raise Conflict(
                "the two tracesets hold no rank in common: choose the ranks to compare "
                "(baseRanks and otherRanks; tracestore compare --base-ranks, --other-ranks)"
            )
        return [(i, j) for _, i, j in pairs]
    chosen = []
    for side, runs, name in ((base, base_ranks, "baseRanks"), (other, other_ranks, "otherRanks")):
        held = sorted(
            (rank, i)
            for i, rank in enumerate(side)
            if rank is not None and overlaps(runs, rank, rank)
        )
        if not held:
            raise ValidationError(
                f"{name}: no analysed rank of that traceset is in {ranks_text(runs)}"
            )
        chosen.append([i for _, i in held])
    if len(chosen[0]) != len(chosen[1]):
        raise ValidationError(
            f"baseRanks chooses {len(chosen[0])} ranks and otherRanks {len(chosen[1])}: "
            "choose as many on each side (they are compared in order)"
        )
    return list(zip(chosen[0], chosen[1], strict=True))


def _median(values: list[int]) -> float | None:
    return None if not values else statistics.median(values)


def _minus(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    difference = a - b
    return round(difference, 3) if isinstance(difference, float) else difference


class Comparison:
    """The comparison, added up a pair of ranks at a time."""

    def __init__(self, steps: Runs | None = None) -> None:
        self.steps = steps
        self._totals: dict[str, list[int]] = {}  # name: base calls, base ns, other calls, ns
        self._ranks: list[dict[str, Any]] = []

    def add(self, base: RankSide, other: RankSide) -> None:
        """One pair of ranks: their kernels into the totals, their row of ``ranks``."""
        sides = []
        for column, side in ((0, base), (2, other)):
            chosen = side.in_steps(self.steps)
            runs = self.steps
            whole = not side.steps  # a file without steps counts every kernel (its rows
            # come after any stepped row: one of those says the file has steps)
            for step, name, calls, duration in side.kernels:
                if step >= 0:
                    whole = False
                    if runs is not None and not overlaps(runs, step, step):
                        continue
                elif not whole:
                    continue
                totals = self._totals.get(name)
                if totals is None:
                    totals = self._totals[name] = [0, 0, 0, 0]
                totals[column] += calls
                totals[column + 1] += duration
            sides.append((side, chosen))
        (b, _), (o, _) = sides
        # Per step when both have steps and their counts differ (without steps, no step).
        per_step = bool(b.steps and o.steps) and len(b.steps) != len(o.steps)
        figures = [self._figures(s, chosen, per_step) for s, chosen in sides]
        diff = {
            part: {
                key: _minus(figures[1][part][key], figures[0][part][key])
                for key in figures[0][part]
            }
            for part in ("temporal", "overlap")
        }
        diff["medianStepUs"] = _minus(figures[1]["medianStepUs"], figures[0]["medianStepUs"])
        self._ranks.append(
            {
                "baseRank": b.rank,
                "otherRank": o.rank,
                "baseFile": b.file,
                "otherFile": o.file,
                "perStep": per_step,
                "base": figures[0],
                "other": figures[1],
                "diff": diff,
            }
        )

    @staticmethod
    def _figures(
        side: RankSide, chosen: list[tuple[int, int, bool]], per_step: bool
    ) -> dict[str, Any]:
        temporal, overlap = side.temporal.to_json(), side.overlap.to_json()
        count = len(side.steps)
        if per_step and count:
            for part in (temporal, overlap):
                for key, value in part.items():
                    if key.endswith("TimeUs"):
                        part[key] = round(value / count, 3)
        median = _median([duration for _, duration, truncated in chosen if not truncated])
        return {
            "steps": len(chosen),
            "temporal": temporal,
            "overlap": overlap,
            "medianStepUs": None if median is None else us(median),
        }

    def to_json(self) -> dict[str, Any]:
        """``{kernels, added, deleted, increased, decreased, unchanged, ranks}``: the kernels
        slower first by how much, then faster by how much, the unchanged durations last."""
        changes: list[tuple[int, str, dict[str, Any]]] = []
        sets: dict[str, list[str]] = {name: [] for name in NAME_SETS}
        for name, (b_calls, b_ns, o_calls, o_ns) in self._totals.items():
            if b_calls == 0 and o_calls == 0:
                continue
            row = {
                "name": name,
                "baseCount": b_calls,
                "otherCount": o_calls,
                "baseDurationUs": us(b_ns),
                "otherDurationUs": us(o_ns),
                "diffCount": o_calls - b_calls,
                "diffDurationUs": us(o_ns - b_ns),
            }
            changes.append((o_ns - b_ns, name, row))
            if not b_calls:
                sets["added"].append(name)
            elif not o_calls:
                sets["deleted"].append(name)
            elif o_calls > b_calls:
                sets["increased"].append(name)
            elif o_calls < b_calls:
                sets["decreased"].append(name)
            else:
                sets["unchanged"].append(name)
        changes.sort(key=lambda c: (c[0] <= 0, c[0] == 0, -abs(c[0]), c[1]))
        rows = [row for _, _, row in changes]
        return {
            "kernels": rows,
            **{name: sorted(names) for name, names in sets.items()},
            "ranks": self._ranks,
        }


def answer(
    base: str,
    other: str,
    pairs: Sequence[tuple[int | None, int | None]],
    steps: Runs | None,
    comparison: Comparison,
) -> dict[str, Any]:
    """The API's object: ``{base, other, steps, kernels, added, deleted, increased,
    decreased, unchanged, ranks}``; ``base`` and ``other`` name the tracesets (ids, or the
    paths compared locally) and the ranks chosen of each, in the order they meet."""
    return {
        "base": {"traceset": base, "ranks": [b for b, _ in pairs]},
        "other": {"traceset": other, "ranks": [o for _, o in pairs]},
        "steps": None if steps is None else ranks_text(steps),
        **comparison.to_json(),
    }


def compare_sides(
    base: tuple[str, Sequence[RankSide]],
    other: tuple[str, Sequence[RankSide]],
    base_ranks: Runs | None = None,
    other_ranks: Runs | None = None,
    steps: Runs | None = None,
) -> dict[str, Any]:
    """The comparison of two sides held whole (local files: each a name and its ranks)."""
    (base_name, base_sides), (other_name, other_sides) = base, other
    pairs = pair_ranks(
        [s.rank for s in base_sides], [s.rank for s in other_sides], base_ranks, other_ranks
    )
    comparison = Comparison(steps)
    for i, j in pairs:
        comparison.add(base_sides[i], other_sides[j])
    ranks = [(base_sides[i].rank, other_sides[j].rank) for i, j in pairs]
    return answer(base_name, other_name, ranks, steps, comparison)
