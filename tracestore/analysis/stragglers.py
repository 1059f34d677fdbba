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
read twice (``RankSource.collectives``), so none of a rank's is held while another is read.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, eq
from typing import Any

from tracestore.analysis.model import RankAnalysis, us

COMPUTE_RATIO = 1.10  # a rank computing this much more than the median rank is a straggler
CLOCK_VIOLATIONS = 0.10  # share of collectives ending before they started: clocks disagree
MIN_ARRIVAL_RANKS = 3  # with two ranks, one of them starts last half the time by chance
MAX_STEPS = 1_000  # steps per rank taken for computeRatio
NO_STEPS = -1  # the step of a rank without ProfilerStep events: its whole trace


@dataclass(frozen=True)
class CollectiveColumns:
    """One rank's collectives in start order, as columns: the process group names, and per
    collective its group (an index into ``groups``, -1: not recorded), NCCL's sequence
    number (-1: not recorded), start and duration (ns)."""

    groups: Sequence[str]
    group_ids: Sequence[int]
    sequences: Sequence[int]
    starts: Sequence[int]
    durations: Sequence[int]

    @classmethod
    def of_rows(cls, rows: Iterable[tuple[str | None, int | None, int, int]]) -> CollectiveColumns:
        """Columns from ``(group, sequence, start, duration)`` rows (None: not recorded)."""
        groups: dict[str, int] = {}
        columns: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        for group, sequence, start, duration in rows:
            columns[0].append(-1 if group is None else groups.setdefault(group, len(groups)))
            columns[1].append(-1 if sequence is None else sequence)
            columns[2].append(start)
            columns[3].append(duration)
        return cls(list(groups), *columns)


@dataclass(frozen=True)
class RankSource:
    """What one rank gives the matching: its collectives (read each time it is called) and
    its computation per step (step number, ns; ``NO_STEPS`` for a trace without steps)."""

    rank: int
    collectives: Callable[[], CollectiveColumns]
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
    failure: str | None = None  # why no verdict could be reached

    def summary_json(self) -> dict[str, Any]:
        """``summary.collectiveMatching``: how the verdict of ``summary.stragglers`` came."""
        notes = _notes(self.arrivals_by, self.violations, self.matched, self.dropped)
        if self.failure is not None:
            notes.append(f"No straggler verdict: {self.failure}.")
        return {
            "matched": self.matched,
            "arrivalsBy": self.arrivals_by,
            "dropped": self.dropped,
            "note": " ".join(notes) or None,
        }


Key = tuple[int, int, int]  # (group, 1 by sequence number or 0 by order, the number)


def _keys(columns: CollectiveColumns, groups: dict[str | None, int]) -> list[Key]:
    """Each collective's key, groups numbered in ``groups`` (shared by the ranks). Built
    with C-speed maps for the common shapes (all with sequence numbers, or one group)."""
    local = [groups.setdefault(name, len(groups)) for name in columns.groups]
    local.append(groups.setdefault(None, len(groups)))  # index -1: no group recorded
    group_of = list(map(local.__getitem__, columns.group_ids))
    sequences = columns.sequences
    if sequences and min(sequences) >= 0:
        return list(zip(group_of, repeat(1), sequences, strict=False))
    if len(set(group_of)) <= 1 and (not sequences or max(sequences) < 0):
        return list(zip(group_of, repeat(0), range(len(group_of)), strict=False))
    order: dict[int, int] = {}
    keys: list[Key] = []
    for group, sequence in zip(group_of, sequences, strict=True):
        if sequence >= 0:
            keys.append((group, 1, sequence))
        else:
            place = order.get(group, 0)
            order[group] = place + 1
            keys.append((group, 0, place))
    return keys


class _Matching:
    """Per collective (by key, an index each): latest start, least end, shortest duration,
    how many ranks hold it; after the second pass, per collective how many ranks started
    it latest / ran it shortest and which. Columns as lists, updated a rank at a time by
    slices when the rank's collectives are those known, in order (the usual case)."""

    def __init__(self) -> None:
        self.index: dict[Key, int] = {}
        self.latest: list[int] = []
        self.least_end: list[int] = []
        self.shortest: list[int] = []
        self.ranks: list[int] = []

    def positions(self, keys: list[Key]) -> tuple[list[int], slice | None]:
        """The keys' indices (new ones added), and their slice when they run in order."""
        found = list(map(self.index.get, keys))
        if None in found:
            index = self.index
            for at, key in enumerate(keys):
                if found[at] is None:
                    found[at] = index.setdefault(key, len(index))
        idx: list[int] = found  # type: ignore[assignment]
        if idx and idx[-1] - idx[0] == len(idx) - 1 and idx == list(range(idx[0], idx[-1] + 1)):
            return idx, slice(idx[0], idx[-1] + 1)
        return idx, None

    def add(self, columns: CollectiveColumns, idx: list[int], span: slice | None) -> None:
        """Pass 1: one rank's collectives."""
        starts, durations = list(columns.starts), list(columns.durations)
        ends = list(map(add, starts, durations))
        grow = max(idx, default=-1) + 1 - len(self.ranks)
        if grow > 0:  # new collectives: neutral values, so that the merge below sets them
            self.latest += [-(1 << 63)] * grow
            self.least_end += [1 << 63] * grow
            self.shortest += [1 << 63] * grow
            self.ranks += [0] * grow
        if span is not None:
            self.latest[span] = list(map(max, self.latest[span], starts))
            self.least_end[span] = list(map(min, self.least_end[span], ends))
            self.shortest[span] = list(map(min, self.shortest[span], durations))
            self.ranks[span] = [count + 1 for count in self.ranks[span]]
            return
        for at, start, end, duration in zip(idx, starts, ends, durations, strict=True):
            self.latest[at] = max(self.latest[at], start)
            self.least_end[at] = min(self.least_end[at], end)
            self.shortest[at] = min(self.shortest[at], duration)
            self.ranks[at] += 1


def _gather(column: list[int], idx: list[int], span: slice | None) -> list[int]:
    return column[span] if span is not None else [column[at] for at in idx]


def verdict(sources: Sequence[RankSource], dropped: int = 0) -> Verdict:
    """The stragglers among ``sources`` (each rank once), worst first."""
    found = _Matching()
    groups: dict[str | None, int] = {}
    for source in sources:
        columns = source.collectives()
        found.add(columns, *found.positions(_keys(columns, groups)))
    counts = found.ranks
    matched = sum(1 for count in counts if count >= 2)
    violations = sum(
        1
        for count, end, start in zip(counts, found.least_end, found.latest, strict=True)
        if count >= 2 and end < start
    )
    by_start = violations <= CLOCK_VIOLATIONS * matched
    # Pass 2: waits, and per collective who started latest (ran shortest): -1 on a tie.
    last = [-2] * len(counts)  # -2: nobody yet
    figures = {source.rank: RankStraggling(source.rank) for source in sources}
    for source in sources:
        columns = source.collectives()
        idx, span = found.positions(_keys(columns, groups))
        rank = figures[source.rank]
        starts, durations = list(columns.starts), list(columns.durations)
        latest = _gather(found.latest, idx, span)
        shortest = _gather(found.shortest, idx, span)
        held = _gather(counts, idx, span)
        if held and min(held) >= 2:
            rank.matched = len(held)
            rank.wait_by_start = sum(latest) - sum(starts)
            rank.wait_by_duration = sum(durations) - sum(shortest)
        else:
            both = [at for at, count in enumerate(held) if count >= 2]
            rank.matched = len(both)
            rank.wait_by_start = sum(latest[at] - starts[at] for at in both)
            rank.wait_by_duration = sum(durations[at] - shortest[at] for at in both)
        rank.judged = sum(1 for count in held if count >= MIN_ARRIVAL_RANKS)
        arrived = map(eq, starts, latest) if by_start else map(eq, durations, shortest)
        for at in compress(idx, arrived):
            last[at] = source.rank if last[at] == -2 else -1
    for at, who in enumerate(last):
        if who >= 0 and counts[at] >= 2:
            figures[who].last_arrivals += 1
            figures[who].last_judged += counts[at] >= MIN_ARRIVAL_RANKS
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
        matched=matched,
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
    kept = analysis.collectives
    columns = CollectiveColumns(
        kept.groups, kept.group_ids, kept.sequences, kept.starts, kept.durations
    )
    return RankSource(rank, lambda: columns, step_compute(analysis))
