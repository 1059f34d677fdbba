"""The per-rank analysis of ANALYTICS.md as plain data, and its JSON (the API's members).

Times are held as integer nanoseconds, so sums are exact whatever a trace's fractional
microseconds; the JSON gives microseconds (an int when whole). A kernel row keeps its count,
sum, least, greatest and the sum of squares of its durations (exact integers), which give
the sample standard deviation without a list of durations and fold rows together exactly.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

COMPUTATION, COMMUNICATION, MEMORY = 0, 1, 2
KIND_NAMES = ("COMPUTATION", "COMMUNICATION", "MEMORY")
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
KERNEL_ROWS = 100  # rows a stored analysis keeps per rank; the rest fold into "others"
OTHERS = "others"
DETAIL_PIECE = 65_536  # numbers per piece of ``RankAnalysis.detail_text``


def us(ns: int | float) -> int | float:
    """Nanoseconds as microseconds: an int when whole."""
    if isinstance(ns, int) and ns % 1000 == 0:
        return ns // 1000
    return ns / 1000


def pct(part: int, whole: int) -> float | None:
    """100 · part / whole rounded to 2 decimals; None when whole is 0."""
    return None if whole == 0 else round(100 * part / whole, 2)


def kind_label(mask: int) -> str:
    """``"COMPUTATION overlapping COMMUNICATION"`` for the kinds set in ``mask``."""
    return " overlapping ".join(name for k, name in enumerate(KIND_NAMES) if mask >> k & 1)


@dataclass
class Temporal:
    kernel_ns: int = 0
    idle_ns: int = 0
    compute_ns: int = 0

    @property
    def non_compute_ns(self) -> int:
        return self.kernel_ns - self.compute_ns - self.idle_ns

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelTimeUs": us(self.kernel_ns),
            "idleTimeUs": us(self.idle_ns),
            "computeTimeUs": us(self.compute_ns),
            "nonComputeTimeUs": us(self.non_compute_ns),
            "idlePct": pct(self.idle_ns, self.kernel_ns),
            "computePct": pct(self.compute_ns, self.kernel_ns),
            "nonComputePct": pct(self.non_compute_ns, self.kernel_ns),
        }


@dataclass
class Overlap:
    communication_ns: int = 0
    overlap_ns: int = 0

    @property
    def pct(self) -> float | None:
        return pct(self.overlap_ns, self.communication_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "communicationTimeUs": us(self.communication_ns),
            "overlapTimeUs": us(self.overlap_ns),
            "pct": self.pct,
        }


@dataclass
class KernelStats:
    """One (kind, name): count, sum, least, greatest and sum of squares of durations (ns)."""

    name: str
    kind: str | None
    count: int = 0
    sum_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    sum_squares: int = 0

    def add(self, duration: int) -> None:
        if self.count == 0:
            self.min_ns = self.max_ns = duration
        else:
            self.min_ns = min(self.min_ns, duration)
            self.max_ns = max(self.max_ns, duration)
        self.count += 1
        self.sum_ns += duration
        self.sum_squares += duration * duration

    def absorb(self, other: KernelStats) -> None:
        """Fold ``other`` into this row."""
        if other.count == 0:
            return
        if self.count == 0:
            self.min_ns, self.max_ns = other.min_ns, other.max_ns
        else:
            self.min_ns = min(self.min_ns, other.min_ns)
            self.max_ns = max(self.max_ns, other.max_ns)
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.sum_squares += other.sum_squares

    @property
    def stddev_ns(self) -> float:
        """The sample standard deviation (0 for one call), from exact integer sums."""
        if self.count < 2:
            return 0.0
        # n·Σx² − (Σx)² is exact in integers: no cancellation, unlike the float formula.
        spread = self.count * self.sum_squares - self.sum_ns * self.sum_ns
        return math.sqrt(spread / (self.count * (self.count - 1)))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "count": self.count,
            "sumUs": us(self.sum_ns),
            "minUs": us(self.min_ns),
            "maxUs": us(self.max_ns),
            "meanUs": self.sum_ns / self.count / 1000 if self.count else 0,
            "stddevUs": self.stddev_ns / 1000,
        }


@dataclass(frozen=True)
class IdleRow:
    stream: int
    category: str
    idle_ns: int
    ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "category": self.category,
            "idleTimeUs": us(self.idle_ns),
            "ratio": self.ratio,
        }


@dataclass
class Step:
    """One ``ProfilerStep#N``: its host window widened to its last device event's end."""

    number: int
    start_ns: int
    host_end_ns: int
    end_ns: int = 0  # the window's end
    device_events: int = 0
    compute_ns: int = 0
    communication_ns: int = 0
    overlap_ns: int = 0
    busy_ns: int = 0
    truncated: bool = False

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.number,
            "startUs": us(self.start_ns),
            "endUs": us(self.end_ns),
            "durationUs": us(self.duration_ns),
            "computeUs": us(self.compute_ns),
            "communicationUs": us(self.communication_ns),
            "overlapUs": us(self.overlap_ns),
            "idleUs": us(self.duration_ns - self.busy_ns),
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class StepKernel:
    """Calls of one kernel name launched inside one step (issue 45's comparison)."""

    step: int
    name: str
    count: int
    duration_ns: int


@dataclass(frozen=True)
class Collective:
    """One communication kernel, in start order (issue 45's straggler matching)."""

    name: str
    process_group: str | None
    sequence: int | None
    start_ns: int
    duration_ns: int


class StepKernels:
    """Per (step, kernel name) calls and time, as packed columns (a row per pair, in step
    then name id order); iterating yields ``StepKernel`` rows."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.steps = array("q")  # step numbers
        self.name_ids = array("q")
        self.counts = array("q")
        self.durations = array("q")  # ns

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[StepKernel]:
        names = self.names
        for step, name, count, duration in zip(
            self.steps, self.name_ids, self.counts, self.durations, strict=True
        ):
            yield StepKernel(step, names[name], count, duration)


class Collectives:
    """Communication kernels in start order, as packed columns (-1: no group or sequence
    number recorded); iterating yields ``Collective`` rows."""

    def __init__(self, names: list[str], groups: list[str]) -> None:
        self.names = names
        self.groups = groups
        self.name_ids = array("q")
        self.group_ids = array("q")
        self.sequences = array("q")
        self.starts = array("q")  # ns
        self.durations = array("q")  # ns

    def append(self, name: int, group: int, sequence: int, start: int, duration: int) -> None:
        self.name_ids.append(name)
        self.group_ids.append(group)
        self.sequences.append(sequence)
        self.starts.append(start)
        self.durations.append(duration)

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[Collective]:
        names, groups = self.names, self.groups
        for name, group, sequence, start, duration in zip(
            self.name_ids, self.group_ids, self.sequences, self.starts, self.durations, strict=True
        ):
            yield Collective(
                names[name],
                None if group < 0 else groups[group],
                None if sequence < 0 else sequence,
                start,
                duration,
            )


@dataclass
class RankAnalysis:
    """Everything ANALYTICS.md computes for one Kineto trace."""

    temporal: Temporal = field(default_factory=Temporal)
    overlap: Overlap = field(default_factory=Overlap)
    kind_breakdown_ns: dict[str, int] = field(default_factory=dict)
    kernels: list[KernelStats] = field(default_factory=list)
    idle: list[IdleRow] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    # Kept for issue 45 (stragglers, comparison), not in the JSON of ANALYTICS.md:
    step_kernels: StepKernels = field(default_factory=lambda: StepKernels([]))
    collectives: Collectives = field(default_factory=lambda: Collectives([], []))
    collectives_dropped: int = 0  # communication kernels past ``Limits.collectives``
    # Counted device events launched in no step (step -1): what a file without steps compares.
    unstepped_kernels: StepKernels = field(default_factory=lambda: StepKernels([]))
    device_events: int = 0  # counted (inside the profiled steps)
    device_events_seen: int = 0

    @property
    def median_step_ns(self) -> float | None:
        """The median duration of the steps, a truncated last step left out."""
        durations = sorted(s.duration_ns for s in self.steps if not s.truncated)
        if not durations:
            return None
        middle = len(durations) // 2
        if len(durations) % 2:
            return durations[middle]
        return (durations[middle - 1] + durations[middle]) / 2

    def to_json(self, kernel_rows: int | None = KERNEL_ROWS) -> dict[str, Any]:
        """The members ANALYTICS.md names for a rank (without ``rank`` and ``file``)."""
        return {
            "temporal": self.temporal.to_json(),
            "overlap": self.overlap.to_json(),
            "kindBreakdown": {k: us(v) for k, v in self.kind_breakdown_ns.items()},
            "kernels": [row.to_json() for row in fold_kernels(self.kernels, kernel_rows)],
            "idle": [row.to_json() for row in self.idle],
            "steps": [step.to_json() for step in self.steps],
        }

    def detail_text(self) -> Iterator[str]:
        """What issue 45 needs besides the API's members, as JSON text in pieces: columns
        over a table of the names they use, per (step, kernel name) the calls and their
        time, every communication kernel in start order (``-1``: no process group or
        sequence number recorded), and per kernel name the calls launched in no step; times
        in ns. In pieces, so that a million collectives never become a list of Python
        numbers."""
        names: dict[str, int] = {}
        step_kernels, collectives = self.step_kernels, self.collectives

        def ids(texts: list[str], column: array[int]) -> array[int]:
            return array("q", (names.setdefault(texts[i], len(names)) for i in column))

        step_names = ids(step_kernels.names, step_kernels.name_ids)
        collective_names = ids(collectives.names, collectives.name_ids)
        unstepped = self.unstepped_kernels
        unstepped_names = ids(unstepped.names, unstepped.name_ids)
        yield '{"names":' + json.dumps(list(names), ensure_ascii=False)
        yield ',"processGroups":' + json.dumps(collectives.groups, ensure_ascii=False)
        yield f',"collectivesDropped":{self.collectives_dropped}'
        tables = (
            ("stepKernels", ("step", "name", "calls", "durationNs")),
            ("collectives", ("name", "processGroup", "sequence", "startNs", "durationNs")),
            ("unstepped", ("name", "calls", "durationNs")),
        )
        values = (
            (step_kernels.steps, step_names, step_kernels.counts, step_kernels.durations),
            (
                collective_names,
                collectives.group_ids,
                collectives.sequences,
                collectives.starts,
                collectives.durations,
            ),
            (unstepped_names, unstepped.counts, unstepped.durations),
        )
        for (member, columns), table in zip(tables, values, strict=True):
            yield f',"{member}":{{'
            for index, (column, numbers) in enumerate(zip(columns, table, strict=True)):
                yield f'{"," if index else ""}"{column}":['
                for start in range(0, len(numbers), DETAIL_PIECE):
                    piece = numbers[start : start + DETAIL_PIECE]
                    yield ("," if start else "") + ",".join(map(str, piece))
                yield "]"
            yield "}"
        yield "}"


def fold_kernels(rows: list[KernelStats], keep: int | None) -> list[KernelStats]:
    """The first ``keep`` rows (by sum, descending) and one ``others`` row with the rest."""
    if keep is None or len(rows) <= keep:
        return rows
    rest = rows[keep:]
    kinds = {row.kind for row in rest}
    others = KernelStats(OTHERS, kinds.pop() if len(kinds) == 1 else None)
    for row in rest:
        others.absorb(row)
    return [*rows[:keep], others]
