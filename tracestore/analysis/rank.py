"""One rank's analysis: compact records collected during the pass, computed after it.

``RankCollector`` takes the events of one Kineto trace (``add_device``, ``add_launch``,
``add_step``, or their column forms) as packed records in ``RecordSort``s, names interned.
``finish`` then runs two passes over sorted records:

1. device events and launches, both by correlation: each device event meets its launch
   (the first host ``cuda_runtime``/``cuda_driver`` event with its correlation), the events
   outside the profiled steps are dropped, kernel rows (exact running sums) and per-step
   totals are added up, and the events go on to a sort by start;
2. device events by start, once: a sweep keeps, per kind, the end of the union run it is
   in, and cuts time into pieces labelled by the kinds active in them. The pieces give
   ``∪D``, ``∪COMPUTATION``, ``∪COMMUNICATION``, their intersections, the kind breakdown and
   the steps' shares; the same loop files each gap on a stream by its cause.

Memory: the sorts share ``Limits.sort_memory``; names, steps and per-step kernel totals are
bounded by their own limits, past which the analysis fails with a reason; collectives kept
for straggler matching by ``Limits.collectives`` (the first ones; the rest are counted).
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from operator import attrgetter

from tracestore.analysis.extsort import RecordSort
from tracestore.analysis.model import (
    COMMUNICATION,
    COMPUTATION,
    IDLE_CATEGORIES,
    KIND_NAMES,
    Collectives,
    IdleRow,
    KernelStats,
    RankAnalysis,
    Step,
    StepKernels,
    kind_label,
)
from tracestore.inspect.model import text as unicode_text

NONE = -(1 << 63)  # a field with no value (no launch, no correlation, no sequence number)
_IDLE = (1 << 63) - 1  # the union end of a kind not running
BATCH = 1 << 16  # records handed to a sort at once
KERNEL_WAIT_NS = 30_000  # a gap shorter than 30 µs is the launch of back-to-back kernels
TRUNCATED_SHARE = 0.8
MIB = 1024 * 1024
_COMPUTE, _COMMUNICATE = 1 << COMPUTATION, 1 << COMMUNICATION


class AnalysisError(Exception):
    """A trace the analysis cannot answer for (a limit passed, a value it cannot use)."""


@dataclass(frozen=True)
class Limits:
    """What one rank's analysis may hold in memory (a server setting feeds ``sort_memory``)."""

    sort_memory: int = 64 * MIB  # records being sorted, and sorting's own objects
    name_bytes: int = 64 * MIB  # distinct kernel and process group names
    steps: int = 100_000
    step_kernels: int = 1_000_000  # (step, kernel name) pairs with their totals
    # Communication kernels kept for straggler matching: the first ones by start; the rest
    # are counted (``RankAnalysis.collectives_dropped``), not kept.
    collectives: int = 10_000


class Names:
    """Interned strings: an id per distinct name, looked up by its raw JSON text or by str."""

    def __init__(self, max_bytes: int, what: str) -> None:
        self.texts: list[str] = []
        self.communication = bytearray()  # 1 where the name starts with nccl or rccl
        self._by_raw: dict[bytes, int] = {}
        self._by_text: dict[str, int] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._what = what

    def raw_id(self, raw: bytes) -> int:
        """The id of a name given as the bytes between its JSON quotes."""
        found = self._by_raw.get(raw)
        if found is None:
            found = self.text_id(_unescape(raw))
            self._by_raw[raw] = found
            self._charge(len(raw))
        return found

    def text_id(self, text: str) -> int:
        """The id of a name (a lone surrogate in it, JSON's ``\\ud800``, read as U+FFFD:
        the name must be Unicode text to be stored and answered)."""
        text = unicode_text(text)
        found = self._by_text.get(text)
        if found is None:
            found = self._by_text[text] = len(self.texts)
            self.texts.append(text)
            self.communication.append(text.startswith(("nccl", "rccl")))
            self._charge(len(text))
        return found

    def _charge(self, size: int) -> None:
        self._bytes += size + 100
        if self._bytes > self._max_bytes:
            raise AnalysisError(
                f"the distinct {self._what} names take more than {self._max_bytes} bytes"
            )


def _unescape(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw.decode("utf-8", "replace")
    try:
        text = json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")
    return text if isinstance(text, str) else raw.decode("utf-8", "replace")


# Field order of a device record sorted by correlation, and of one sorted by start.
DEVICE_FIELDS = ("correlation", "start", "end", "stream", "kind", "name", "group", "sequence")
TIMELINE_FIELDS = ("start", "end", "stream", "kind", "name", "launch", "group", "sequence")


class RankCollector:
    """Takes one trace's events; ``finish`` computes its ``RankAnalysis``."""

    def __init__(self, limits: Limits | None = None, directory: str | None = None) -> None:
        self.limits = limits or Limits()
        self.names = Names(self.limits.name_bytes, "kernel")
        self.groups = Names(self.limits.name_bytes, "process group")
        self._directory = directory
        # At most three sorts are alive at once (two while collecting, three while joining).
        self._share = self.limits.sort_memory // 3
        self._devices = RecordSort(len(DEVICE_FIELDS), 1, self._share, directory)
        self._launches = RecordSort(2, 1, self._share, directory)
        self._steps: dict[int, tuple[int, int]] = {}
        self.spilled = False  # whether a sort went to disk (known after ``finish``)

    def add_device(
        self,
        start: int,
        end: int,
        stream: int,
        kind: int,
        name: int,
        correlation: int = NONE,
        group: int = NONE,
        sequence: int = NONE,
    ) -> None:
        """One device event (times in ns; ``name``/``group`` ids of ``names``/``groups``)."""
        self._devices.add((correlation, start, end, stream, kind, name, group, sequence))

    def add_devices(self, columns: list[list[int]]) -> None:
        """Device events as columns in ``DEVICE_FIELDS`` order."""
        self._devices.add_columns(columns)

    def add_launch(self, correlation: int, ts: int) -> None:
        """A host launch (``cuda_runtime``/``cuda_driver``) of ``correlation`` at ``ts`` ns."""
        self._launches.add((correlation, ts))

    def add_launches(self, correlations: list[int], stamps: list[int]) -> None:
        """Launches as two columns."""
        self._launches.add_columns((correlations, stamps))

    def add_step(self, number: int, start: int, end: int) -> None:
        """A host ``ProfilerStep#number`` from ``start`` to ``end`` ns (repeats widen it)."""
        known = self._steps.get(number)
        if known is not None:
            start, end = min(start, known[0]), max(end, known[1])
        elif len(self._steps) >= self.limits.steps:
            raise AnalysisError(f"more than {self.limits.steps} ProfilerStep events")
        self._steps[number] = (start, end)

    def close(self) -> None:
        """Remove the sorts' temporary files."""
        self._devices.close()
        self._launches.close()

    def finish(self) -> RankAnalysis:
        """The analysis of everything added (call once)."""
        try:
            steps = sorted(
                (Step(n, start, end) for n, (start, end) in self._steps.items()),
                key=attrgetter("start_ns", "number"),
            )
            result = RankAnalysis(steps=steps, device_events_seen=self._devices.count)
            with RecordSort(len(TIMELINE_FIELDS), 2, self._share, self._directory) as timeline:
                self._join(result, timeline)
                self.spilled = self._devices.spilled or self._launches.spilled
                self._devices.close()
                self._launches.close()
                self.spilled = self.spilled or timeline.spilled
                _sweep(result, timeline, self.names, self.groups, self.limits)
            _mark_truncated(steps)
            return result
        except OverflowError:  # a step's kernel totals, kept as 64-bit integers
            raise AnalysisError(
                "a sum of kernel durations is beyond 64 bits of nanoseconds"
            ) from None
        finally:
            self.close()

    def _join(self, result: RankAnalysis, timeline: RecordSort) -> None:
        steps = result.steps
        profiled = len(steps) >= 2
        last_end = max((s.host_end_ns for s in steps), default=0)
        starts = array("q", (s.start_ns for s in steps))
        for step in steps:
            step.end_ns = step.host_end_ns
        stats: dict[tuple[int, int], KernelStats] = {}
        per_step: dict[int, int] = {}  # step index << 32 | name id: its row in the columns
        calls, times = array("q"), array("q")
        unstepped: dict[int, list[int]] = {}  # name id: calls, ns
        names = self.names.texts
        launches = self._launches.rows()
        launch_corr, launch_ts = next(launches, (NONE, NONE))
        columns: list[list[int]] = [[] for _ in TIMELINE_FIELDS]
        starts_, ends_, streams, kinds, ids, launched, groups, seqs = columns
        for corr, start, end, stream, kind, name, group, seq in self._devices.rows():
            while launch_corr < corr:
                launch_corr, launch_ts = next(launches, (-NONE - 1, NONE))
            launch = launch_ts if launch_corr == corr != NONE else NONE
            if profiled and (launch == NONE or launch > last_end):
                continue  # the profiler's tail, or a kernel whose launch is not in the file
            if end < start:
                end = start  # a negative duration counts as none
            key = (kind, name)
            row = stats.get(key)
            if row is None:
                row = stats[key] = KernelStats(names[name], KIND_NAMES[kind])
            row.add(end - start)
            stepped = False
            if launch != NONE and steps:
                index = bisect_right(starts, launch) - 1
                if index >= 0 and launch < steps[index].host_end_ns:
                    stepped = True
                    step = steps[index]
                    step.device_events += 1
                    if end > step.end_ns:
                        step.end_ns = end
                    row_of = per_step.get(index << 32 | name)
                    if row_of is None:
                        if len(per_step) >= self.limits.step_kernels:
                            raise AnalysisError(
                                f"more than {self.limits.step_kernels} (step, kernel) pairs"
                            )
                        row_of = per_step[index << 32 | name] = len(calls)
                        calls.append(0)
                        times.append(0)
                    calls[row_of] += 1
                    times[row_of] += end - start
            if not stepped:  # counted, in no step: a file without steps compares these
                totals = unstepped.setdefault(name, [0, 0])
                totals[0] += 1
                totals[1] += end - start
            starts_.append(start)
            ends_.append(end)
            streams.append(stream)
            kinds.append(kind)
            ids.append(name)
            launched.append(launch)
            groups.append(group)
            seqs.append(seq)
            if len(starts_) >= BATCH:
                timeline.add_columns(columns)
                for column in columns:
                    column.clear()
        timeline.add_columns(columns)
        result.device_events = timeline.count
        result.kernels = sorted(stats.values(), key=lambda r: (-r.sum_ns, r.kind, r.name))
        table = result.step_kernels = StepKernels(names)
        for pair in sorted(per_step):
            table.steps.append(steps[pair >> 32].number)
            table.name_ids.append(pair & 0xFFFFFFFF)
            table.counts.append(calls[per_step[pair]])
            table.durations.append(times[per_step[pair]])
        outside = result.unstepped_kernels = StepKernels(names)
        for name_id in sorted(unstepped):
            outside.steps.append(-1)
            outside.name_ids.append(name_id)
            outside.counts.append(unstepped[name_id][0])
            outside.durations.append(unstepped[name_id][1])


class _Windows:
    """The steps' windows, each taking its share of the pieces that cross it."""

    def __init__(self, steps: list[Step]) -> None:
        self._waiting = sorted(steps, key=attrgetter("start_ns"), reverse=True)
        self._active: list[Step] = []

    def add(self, lo: int, hi: int, mask: int) -> None:
        waiting, active = self._waiting, self._active
        while waiting and waiting[-1].start_ns < hi:
            active.append(waiting.pop())
        ended = False
        for step in active:
            a = lo if lo > step.start_ns else step.start_ns
            b = hi if hi < step.end_ns else step.end_ns
            if b > a:
                length = b - a
                step.busy_ns += length
                if mask & _COMPUTE:
                    step.compute_ns += length
                if mask & _COMMUNICATE:
                    step.communication_ns += length
                    if mask & _COMPUTE:
                        step.overlap_ns += length
            ended = ended or step.end_ns <= hi
        if ended:
            self._active = [step for step in active if step.end_ns > hi]


class _Pieces:
    """Time cut into pieces by the kinds running in them: per kind, the end of the union
    run it is in; ``ns[mask]`` the time with exactly the kinds of ``mask`` running."""

    def __init__(self, windows: _Windows | None) -> None:
        self.ns = [0] * 8
        self._ends = [_IDLE, _IDLE, _IDLE]
        self._mask = 0
        self._now = 0  # the time up to which pieces are counted
        self._windows = windows

    def advance(self, to: int) -> None:
        """Count the pieces up to ``to`` (an event starts there, or ``_IDLE``: the end)."""
        ends = self._ends
        while self._mask and (upto := min(ends)) <= to:
            self._count(upto)
            for k in range(3):
                if ends[k] == upto:
                    ends[k] = _IDLE
                    self._mask &= ~(1 << k)
        if to != _IDLE:
            self._count(to)

    def add(self, kind: int, end: int) -> None:
        """An event of ``kind`` starting now (where ``advance`` stopped), ending at ``end``."""
        if self._ends[kind] == _IDLE:
            self._ends[kind] = end
            self._mask |= 1 << kind
        elif end > self._ends[kind]:
            self._ends[kind] = end

    def _count(self, upto: int) -> None:
        if self._mask and upto > self._now:
            self.ns[self._mask] += upto - self._now
            if self._windows is not None:
                self._windows.add(self._now, upto, self._mask)
        self._now = upto


def _sweep(
    result: RankAnalysis, timeline: RecordSort, names: Names, groups: Names, limits: Limits
) -> None:
    pieces = _Pieces(_Windows(result.steps) if result.steps else None)
    first, last = NONE, NONE
    prev_end: dict[int, int] = {}
    idle: dict[int, list[int]] = {}
    seen: dict[int, list[bool]] = {}
    collectives = Collectives(names.texts, groups.texts)
    for start, end, stream, kind, name, launch, group, seq in timeline.rows():
        if first == NONE:
            first = start
        if end > last:
            last = end
        before = prev_end.get(stream)
        if before is not None:
            gap = start - before
            cause = 0 if launch != NONE and launch > before else 1 if gap < KERNEL_WAIT_NS else 2
            idle[stream][cause] += gap
            seen[stream][cause] = True
        else:
            idle[stream] = [0, 0, 0]
            seen[stream] = [False, False, False]
        prev_end[stream] = end
        pieces.advance(start)
        pieces.add(kind, end)
        if kind == COMMUNICATION:
            if len(collectives) < limits.collectives:
                collectives.append(name, max(group, -1), max(seq, -1), start, end - start)
            else:
                result.collectives_dropped += 1
    pieces.advance(_IDLE)
    piece_ns = pieces.ns
    busy = sum(piece_ns[1:])
    kernel_ns = last - first if first != NONE else 0
    result.temporal.kernel_ns = kernel_ns
    result.temporal.idle_ns = kernel_ns - busy
    result.temporal.compute_ns = sum(v for m, v in enumerate(piece_ns) if m & _COMPUTE)
    result.overlap.communication_ns = sum(v for m, v in enumerate(piece_ns) if m & _COMMUNICATE)
    result.overlap.overlap_ns = piece_ns[_COMPUTE | _COMMUNICATE] + piece_ns[7]
    result.kind_breakdown_ns = {kind_label(m): v for m, v in enumerate(piece_ns) if m and v}
    result.collectives = collectives
    for stream in sorted(idle):
        total = sum(idle[stream])
        for cause, category in enumerate(IDLE_CATEGORIES):
            if seen[stream][cause]:
                ratio = None if total == 0 else round(idle[stream][cause] / total, 2)
                result.idle.append(IdleRow(stream, category, idle[stream][cause], ratio))


def _mark_truncated(steps: list[Step]) -> None:
    if len(steps) >= 2 and steps[-1].device_events < TRUNCATED_SHARE * steps[-2].device_events:
        steps[-1].truncated = True
