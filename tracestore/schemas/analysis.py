"""A traceset's analysis as ``GET /api/v1/tracesets/{id}/analysis`` answers it (ANALYTICS.md):
where each rank's GPU time went, and the summary over its ranks. Times in microseconds (an
integer when whole), percentages rounded to 2 decimals."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tracestore.schemas.wire import Timestamp, WireModel

Number = int | float
Kind = Literal["COMPUTATION", "COMMUNICATION", "MEMORY"]


class TemporalBreakdown(WireModel):
    """The span from the first device event's start to the last one's end, cut into compute,
    non-compute (communication and memory time not under computation) and idle time."""

    kernel_time_us: Number
    idle_time_us: Number
    compute_time_us: Number
    non_compute_time_us: Number
    idle_pct: float | None
    compute_pct: float | None
    non_compute_pct: float | None


class CommunicationOverlap(WireModel):
    """How much communication time ran under computation (``pct`` None without any)."""

    communication_time_us: Number
    overlap_time_us: Number
    pct: float | None


class KernelRow(WireModel):
    """One (kind, name) with the statistics of its calls' durations; the last row of a
    rank with more than 100 is ``others``, the rest's totals (its kind theirs if common)."""

    name: str
    kind: Kind | None
    count: int
    sum_us: Number
    min_us: Number
    max_us: Number
    mean_us: Number
    stddev_us: Number


class IdleRow(WireModel):
    """A stream's idle time of one cause, and its share of the stream's idle time."""

    stream: int
    category: Literal["host_wait", "kernel_wait", "other"]
    idle_time_us: Number
    ratio: float | None


class StepRow(WireModel):
    """One ``ProfilerStep#N``: its window and, within it, the kinds' time."""

    step: int
    start_us: Number
    end_us: Number
    duration_us: Number
    compute_us: Number
    communication_us: Number
    overlap_us: Number
    idle_us: Number
    truncated: bool


class RankAnalysis(WireModel):
    """One Kineto file's analysis (``status`` complete), or why there is none (``failed``,
    with ``reason``, and no other member)."""

    rank: int | None
    file: str
    status: Literal["complete", "failed"]
    reason: str | None = None
    temporal: TemporalBreakdown | None = None
    overlap: CommunicationOverlap | None = None
    kind_breakdown: dict[str, Number] | None = None
    kernels: list[KernelRow] | None = None
    idle: list[IdleRow] | None = None
    steps: list[StepRow] | None = None
    truncated: dict[str, Any] | None = Field(
        default=None,
        description="Present when the stored analysis was shortened to fit its share of "
        "TRACESTORE_MAX_ANALYSIS_SIZE: what was cut",
    )


class Spread(WireModel):
    """The median, least and greatest over ranks (None when no rank has the number)."""

    median: Number | None
    min: Number | None
    max: Number | None


class Straggler(WireModel):
    """A rank that held the others back: it computes longest per step, or arrives last at
    the collectives (ANALYTICS.md, "Stragglers")."""

    rank: int
    compute_ratio: float | None = Field(
        description="The median over steps of its computation time in the step divided by "
        "the median rank's; null without steps shared with another rank"
    )
    wait_us: Number = Field(
        description="Its total wait at matched collectives: the latest start minus its own "
        "(or, when the hosts' clocks disagree, its kernel's duration minus the shortest)"
    )
    last_arrivals: int = Field(description="How often it was the last to arrive")
    reason: str = Field(description="The verdict in words")


class CollectiveMatching(WireModel):
    """How the collectives were matched across ranks for ``stragglers``."""

    matched: int = Field(description="Collectives matched across two ranks or more")
    arrivals_by: Literal["start", "duration"] | None = Field(
        description="start: arrivals ordered by each collective's starts on the hosts' "
        "clocks (which passed a causality test); duration: the clocks disagree, the last to "
        "arrive is the rank whose kernel ran shortest; null: nothing matched"
    )
    dropped: int = Field(
        description="Collectives past TRACESTORE_STRAGGLER_COLLECTIVES per rank, not matched"
    )
    note: str | None = Field(description="What the verdict rests on, in words")


class AnalysisSummary(WireModel):
    """Over the analysed ranks: each number's spread, the slowest and fastest rank by
    median step time, and the stragglers, worst first (absent from a summary stored before
    the service looked for them)."""

    rank_count: int
    compute_pct: Spread
    non_compute_pct: Spread
    idle_pct: Spread
    overlap_pct: Spread
    step_time_us: Spread
    slowest_rank: int | None
    fastest_rank: int | None
    stragglers: list[Straggler] = Field(default_factory=list)
    collective_matching: CollectiveMatching | None = None


class TracesetAnalysis(WireModel):
    """``pending`` while its jobs run (``ranks``: the files analysed so far), ``complete``
    (at least one Kineto file analysed; those that could not be are entries with their
    reason), ``failed`` (none could be, or the jobs were given up: ``reason``), ``none``
    (the traceset holds no Kineto trace, or was stored before the service analysed
    traces: ``reason``)."""

    status: Literal["pending", "complete", "failed", "none"]
    reason: str | None
    analyzed_at: Timestamp | None
    ranks: list[RankAnalysis]
    summary: AnalysisSummary | None
