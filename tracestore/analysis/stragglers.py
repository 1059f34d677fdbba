"""Which rank held the others back (ANALYTICS.md, "Stragglers"): collectives matched across
a traceset's ranks, each rank's wait and arrivals, its computation against the median rank's.

A collective is known by its process group and its place in it: NCCL's sequence number
where the trace records one (``Seq``), else its order among the rank's kernels of that
group (so a rank that misses one shifts the rest of its group: they still match, wrongly,
but nothing breaks). Per matched collective (two ranks or more) each rank's **wait** is the
latest start minus its own, and the rank with the latest start **arrived last**.

Host clocks differ between machines, so starts are compared across ranks only to order the
starts of one collective, and only when the clocks pass a test of causality: no rank can
finish a collective before the last one started it, so the least end must not precede the
latest start. When that fails in more than ``CLOCK_VIOLATIONS`` of the matched collectives
(clocks seconds apart), the order comes from durations alone: a collective ends together on
every rank, so the rank that arrived last is the one whose kernel ran shortest, and a rank's
wait is its kernel's duration minus the shortest one's. ``Verdict.arrivals_by`` says which.

Memory: per matched collective a few numbers (``Limits.collectives`` per rank bounds them),
per rank its sums and its steps' computation (the first ``MAX_STEPS``). The collectives are
read twice (``Sources``), so none of a rank's is held while another is read.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tracestore.analysis.model import RankAnalysis, us

COMPUTE_RATIO = 1.10  # a rank computing this much more than the median rank is a straggler
CLOCK_VIOLATIONS = 0.10  # share of collectives ending before they started: clocks disagree
MIN_ARRIVAL_RANKS = 3  # with two ranks, one of them starts last half the time by chance
MAX_STEPS = 1_000  # steps per rank taken for computeRatio
NO_STEPS = -1  # the step of a rank without ProfilerStep events: its whole trace

# One collective as a rank's trace holds it: process group (None: not recorded), NCCL's
# sequence number (None: not recorded), start and duration (ns).
CollectiveRow = tuple[str | None, int | None, int, int]


@dataclass(frozen=True)
class RankSource:
    """What one rank gives the matching: its collectives (read each time it is called, in
    start order) and its computation per step (step number, ns; ``NO_STEPS`` for a trace
    without steps)."""

    rank: int
    collectives: Callable[[], Iterable[CollectiveRow]]
    step_compute: Sequence[tuple[int, int]]


@dataclass
class RankStraggling:
    """One rank's figures: ``waitUs``, ``lastArrivals``, ``computeRatio``."""

    rank: int
    matched: int = 0  # matched collectives it took part in
    judged: int = 0  # ... of them with at least MIN_ARRIVAL_RANKS ranks
    last_arrivals: int = 0
    last_judged: int = 0  # last arrivals among the judged ones
    wait_by_start: int = 0  # ns
    wait_by_duration: int = 0  # ns
    compute_ratio: float | None = None


@dataclass
class Verdict:
    """The stragglers of a traceset and how they were found."""

    ranks: list[RankStraggling]
    stragglers: list[dict[str, Any]]
    matched: int  # collectives matched across two ranks or more
    arrivals_by: str | None  # "start", "duration", or None without matched collectives
    violations: int = 0  # matched collectives that ended on a rank before their last start
    dropped: int = 0  # collectives past Limits.collectives, not matched

    def summary_json(self) -> dict[str, Any]:
        """``summary.collectiveMatching``: how the verdict of ``summary.stragglers`` came."""
        notes = _notes(self.arrivals_by, self.violations, self.matched, self.dropped)
        return {
            "matched": self.matched,
            "arrivalsBy": self.arrivals_by,
            "dropped": self.dropped,
            "note": " ".join(notes) or None,
        }


class _Collectives:
    """Per matched collective (by key): latest start, least end, shortest duration, the
    rank that holds each extreme (-1 on a tie) and how many ranks took part."""

    def __init__(self) -> None:
        self.index: dict[tuple[int, int, int], int] = {}
        self.latest_start = array("q")
        self.latest_rank = array("q")
        self.least_end = array("q")
        self.shortest = array("q")
        self.shortest_rank = array("q")
        self.ranks = array("q")

    def add(self, key: tuple[int, int, int], rank: int, start: int, duration: int) -> None:
        at = self.index.get(key)
        if at is None:
            self.index[key] = len(self.ranks)
            for column, value in (
                (self.latest_start, start),
                (self.latest_rank, rank),
                (self.least_end, start + duration),
                (self.shortest, duration),
                (self.shortest_rank, rank),
                (self.ranks, 1),
            ):
                column.append(value)
            return
        self.ranks[at] += 1
        if start > self.latest_start[at]:
            self.latest_start[at], self.latest_rank[at] = start, rank
        elif start == self.latest_start[at]:
            self.latest_rank[at] = -1
        if duration < self.shortest[at]:
            self.shortest[at], self.shortest_rank[at] = duration, rank
        elif duration == self.shortest[at]:
            self.shortest_rank[at] = -1
        self.least_end[at] = min(self.least_end[at], start + duration)


def _keys(rows: Iterable[CollectiveRow], groups: dict[str | None, int]) -> Iterator[Any]:
    """Each row's key (group, by sequence number or by order, the number) with its start
    and duration."""
    order: dict[int, int] = {}
    for group, sequence, start, duration in rows:
        group_id = groups.setdefault(group, len(groups))
        if sequence is not None:
            yield (group_id, 1, sequence), start, duration
        else:
            place = order.get(group_id, 0)
            order[group_id] = place + 1
            yield (group_id, 0, place), start, duration


def verdict(sources: Sequence[RankSource], dropped: int = 0) -> Verdict:
    """The stragglers among ``sources`` (each rank once), worst first."""
    found = _Collectives()
    groups: dict[str | None, int] = {}
    for source in sources:
        for key, start, duration in _keys(source.collectives(), groups):
            found.add(key, source.rank, start, duration)
    matched = [at for at in range(len(found.ranks)) if found.ranks[at] >= 2]
    violations = sum(1 for at in matched if found.least_end[at] < found.latest_start[at])
    by_start = violations <= CLOCK_VIOLATIONS * len(matched)
    last = found.latest_rank if by_start else found.shortest_rank
    figures = {source.rank: RankStraggling(source.rank) for source in sources}
    for source in sources:
        rank = figures[source.rank]
        for key, start, duration in _keys(source.collectives(), groups):
            at = found.index[key]
            if found.ranks[at] < 2:
                continue
            rank.matched += 1
            rank.wait_by_start += found.latest_start[at] - start
            rank.wait_by_duration += duration - found.shortest[at]
            judged = found.ranks[at] >= MIN_ARRIVAL_RANKS
            rank.judged += judged
            if last[at] == source.rank:
                rank.last_arrivals += 1
                rank.last_judged += judged
    _compute_ratios(sources, figures)
    arrivals_by = None if not matched else "start" if by_start else "duration"
    ranks = [figures[source.rank] for source in sources]
    stragglers = sorted(
        (rank for rank in ranks if _straggles(rank)),
        key=lambda r: (-(r.compute_ratio or 0), -r.last_arrivals / max(r.matched, 1), r.rank),
    )
    return Verdict(
        ranks=ranks,
        stragglers=[_entry(rank, arrivals_by) for rank in stragglers],
        matched=len(matched),
        arrivals_by=arrivals_by,
        violations=violations,
        dropped=dropped,
    )


def _compute_ratios(sources: Sequence[RankSource], figures: dict[int, RankStraggling]) -> None:
    """Per rank, the median over its steps of its computation in the step divided by the
    median rank's in that step (steps matched by number)."""
    by_step: dict[int, list[int]] = {}
    for source in sources:
        for step, compute in source.step_compute[:MAX_STEPS]:
            by_step.setdefault(step, []).append(compute)
    medians = {step: statistics.median(values) for step, values in by_step.items()}
    for source in sources:
        ratios = [
            compute / medians[step]
            for step, compute in source.step_compute[:MAX_STEPS]
            if medians[step] > 0 and len(by_step[step]) >= 2
        ]
        if ratios:
            figures[source.rank].compute_ratio = round(statistics.median(ratios), 2)


def _straggles(rank: RankStraggling) -> bool:
    slow = rank.compute_ratio is not None and rank.compute_ratio >= COMPUTE_RATIO
    return slow or (rank.judged > 0 and rank.last_judged * 2 > rank.judged)


def _entry(rank: RankStraggling, arrivals_by: str | None) -> dict[str, Any]:
    wait = rank.wait_by_start if arrivals_by == "start" else rank.wait_by_duration
    return {
        "rank": rank.rank,
        "computeRatio": rank.compute_ratio,
        "waitUs": us(wait),
        "lastArrivals": rank.last_arrivals,
        "reason": reason(rank, arrivals_by),
    }


def reason(rank: RankStraggling, arrivals_by: str | None) -> str:
    """The verdict on ``rank`` in words ("rank 5 computes 1.31 × the median rank per step
    and waited least in 38 of 40 collectives")."""
    parts = []
    if rank.compute_ratio is not None:
        parts.append(f"computes {rank.compute_ratio:.2f} × the median rank per step")
    if rank.matched:
        verb = "started last" if arrivals_by == "start" else "waited least"
        parts.append(f"{verb} in {rank.last_arrivals} of {rank.matched} collectives")
    text = f"rank {rank.rank} " + " and ".join(parts)
    slow = rank.compute_ratio is not None and rank.compute_ratio >= COMPUTE_RATIO
    if not slow and arrivals_by == "start":
        text += " (an order of starts read from the hosts' clocks, which may differ)"
    return text


def _notes(arrivals_by: str | None, violations: int, matched: int, dropped: int) -> list[str]:
    notes = []
    if arrivals_by == "start":
        notes.append(
            "Arrivals and waits order the starts of each collective by the hosts' clocks "
            f"(consistent: {violations} of {matched} collectives ended on a rank before "
            "their last start)."
        )
    elif arrivals_by == "duration":
        notes.append(
            f"The hosts' clocks disagree ({violations} of {matched} collectives ended on a "
            "rank before their last start): arrivals and waits come from each collective's "
            "durations, the shortest kernel being the last to arrive."
        )
    if dropped:
        notes.append(
            f"{dropped} collectives past TRACESTORE_STRAGGLER_COLLECTIVES per rank were "
            "not matched."
        )
    return notes


def step_compute(analysis: RankAnalysis) -> list[tuple[int, int]]:
    """A rank's computation per step (a truncated last step left out), or its whole
    trace's as ``NO_STEPS`` when it has no steps."""
    if not analysis.steps:
        return [(NO_STEPS, analysis.temporal.compute_ns)]
    return [(s.number, s.compute_ns) for s in analysis.steps if not s.truncated]


def analysis_source(rank: int, analysis: RankAnalysis) -> RankSource:
    """``analysis``'s collectives and steps for the matching."""

    def rows() -> Iterator[CollectiveRow]:
        for c in analysis.collectives:
            yield c.process_group, c.sequence, c.start_ns, c.duration_ns

    return RankSource(rank, rows, step_compute(analysis))
