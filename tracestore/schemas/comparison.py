"""The comparison of two tracesets as ``GET /api/v1/tracesets/{id}/compare`` answers it
(ANALYTICS.md, "Comparison of two tracesets"): ``base`` is the traceset of the path,
``other`` the one ``with`` names; every difference is other minus base. Times in
microseconds (an integer when whole)."""

from __future__ import annotations

from pydantic import Field

from tracestore.schemas.analysis import CommunicationOverlap, Number, TemporalBreakdown
from tracestore.schemas.wire import WireModel


class ComparedSide(WireModel):
    """A side: the traceset (its id; the path given, compared locally) and its ranks chosen,
    in the order they meet the other side's."""

    traceset: str
    ranks: list[int | None]


class KernelChange(WireModel):
    """One kernel name's calls and total duration in the chosen ranks and steps of each
    side, and the differences."""

    name: str
    base_count: int
    other_count: int
    base_duration_us: Number
    other_duration_us: Number
    diff_count: int
    diff_duration_us: Number


class RankFiguresOfSide(WireModel):
    """One rank's figures: its steps chosen, its temporal breakdown and overlap (its whole
    profiled span; the times per step when the two ranks' step counts differ), and the
    median duration of its chosen steps (a truncated last step left out)."""

    steps: int
    temporal: TemporalBreakdown
    overlap: CommunicationOverlap
    median_step_us: Number | None


class TemporalDifference(WireModel):
    """Other minus base, member by member (None where either is None)."""

    kernel_time_us: Number | None
    idle_time_us: Number | None
    compute_time_us: Number | None
    non_compute_time_us: Number | None
    idle_pct: float | None
    compute_pct: float | None
    non_compute_pct: float | None


class OverlapDifference(WireModel):
    """Other minus base, member by member (None where either is None)."""

    communication_time_us: Number | None
    overlap_time_us: Number | None
    pct: float | None


class RankDifference(WireModel):
    """The differences of the temporal breakdown, overlap and median step time."""

    temporal: TemporalDifference
    overlap: OverlapDifference
    median_step_us: Number | None


class RankComparison(WireModel):
    """A base rank and the other rank it meets."""

    base_rank: int | None
    other_rank: int | None
    base_file: str
    other_file: str
    per_step: bool = Field(
        description="Whether the two differ in step count, and the times are per step"
    )
    base: RankFiguresOfSide
    other: RankFiguresOfSide
    diff: RankDifference


class TracesetComparison(WireModel):
    """Per kernel name the change, slower first by how much, then faster by how much, then
    the unchanged durations; the names by how their call count changed (as HTA's
    ``ops_diff``); per rank pair the differences of the analysis's figures."""

    base: ComparedSide
    other: ComparedSide
    steps: str | None = Field(description="The steps chosen (None: every profiled step)")
    kernels: list[KernelChange]
    added: list[str] = Field(description="Names only in other")
    deleted: list[str] = Field(description="Names only in base")
    increased: list[str] = Field(description="Names in both, called more often in other")
    decreased: list[str] = Field(description="Names in both, called less often in other")
    unchanged: list[str] = Field(description="Names in both, called as often")
    ranks: list[RankComparison]
