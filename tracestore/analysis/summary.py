"""The traceset's ``summary``: medians, least and greatest over its ranks (ANALYTICS.md).

``stragglers`` (and ``collectiveMatching``, how they were found) come from matching the
ranks' collectives (``stragglers.verdict``), which the service does apart from the figures.
A rank's step time is the median duration of its steps (a truncated last step left out);
ranks without steps, or without communication for ``overlapPct``, do not count for that
number. The summary is computed from each rank's few figures (``RankFigures``), which the
service keeps beside each rank's stored analysis, so that assembling a traceset's summary
reads no rank's JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracestore.analysis.model import RankAnalysis, us
from tracestore.analysis.stragglers import Verdict, analysis_source, verdict


@dataclass(frozen=True)
class RankFigures:
    """What the summary takes from one rank (percentages as the rank's JSON gives them)."""

    rank: int | None
    file: str
    compute_pct: float | None
    non_compute_pct: float | None
    idle_pct: float | None
    overlap_pct: float | None
    step_time_us: float | None  # the median step duration


@dataclass(frozen=True)
class AnalysedRank:
    """One analysed Kineto file of a traceset."""

    rank: int | None
    file: str
    analysis: RankAnalysis

    def to_json(self, kernel_rows: int | None = None) -> dict[str, Any]:
        """The API's entry of ``ranks``: ``{rank, file, status, reason, temporal, overlap,
        kindBreakdown, kernels, idle, steps}``."""
        kept = {} if kernel_rows is None else {"kernel_rows": kernel_rows}
        return {**entry_head(self.rank, self.file), **self.analysis.to_json(**kept)}

    def figures(self) -> RankFigures:
        """The rank's figures for the summary."""
        return figures_of(self.rank, self.file, self.analysis)


def figures_of(rank: int | None, file: str, analysis: RankAnalysis) -> RankFigures:
    """``analysis``'s figures for the summary."""
    temporal = analysis.temporal.to_json()
    step_ns = analysis.median_step_ns
    return RankFigures(
        rank=rank,
        file=file,
        compute_pct=temporal["computePct"],
        non_compute_pct=temporal["nonComputePct"],
        idle_pct=temporal["idlePct"],
        overlap_pct=analysis.overlap.pct,
        step_time_us=None if step_ns is None else us(step_ns),
    )


def entry_head(rank: int | None, file: str, reason: str | None = None) -> dict[str, Any]:
    """The first members of an entry of ``ranks``: a complete one's (``reason`` None, the
    analysis's members follow), or a failed one's whole."""
    status = "complete" if reason is None else "failed"
    return {"rank": rank, "file": file, "status": status, "reason": reason}


def outcome(analysed: int, failed: int, archived: bool = False) -> tuple[str, str | None]:
    """A traceset's analysis ``status`` and its ``reason``, once every Kineto trace was read:
    ``complete`` when one could be analysed, else ``failed``, or ``none`` without any (said
    otherwise when it holds Kineto traces only inside archives, ``archived``)."""
    if analysed:
        return "complete", None
    if failed:
        return "failed", (
            f"none of its {failed} Kineto trace{'s' if failed > 1 else ''} could be analysed "
            "(each entry of ranks says why)"
        )
    if archived:
        return "none", ARCHIVED
    return "none", "the traceset holds no Kineto trace"


ARCHIVED = (
    "its Kineto traces are inside archives, which are not analysed: upload them as files "
    "of their own to have them analysed"
)


def _spread(values: Sequence[float], digits: int | None = 2) -> dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None}
    median = statistics.median(values)
    spread = {"median": median, "min": min(values), "max": max(values)}
    if digits is None:
        return spread
    return {key: round(value, digits) for key, value in spread.items()}


def summary(ranks: Sequence[AnalysedRank]) -> dict[str, Any]:
    """``{rankCount, computePct, nonComputePct, idlePct, overlapPct, stepTimeUs, slowestRank,
    fastestRank, stragglers, collectiveMatching}``; each of the five a ``{median, min,
    max}``."""
    return {
        **figures_summary([r.figures() for r in ranks]),
        **straggler_members(ranks_verdict(ranks)),
    }


def ranks_verdict(ranks: Sequence[AnalysedRank]) -> Verdict:
    """The stragglers among ``ranks`` (the first file of each rank; files without a rank
    take no part)."""
    seen: dict[int, AnalysedRank] = {}
    for r in ranks:
        if r.rank is not None:
            seen.setdefault(r.rank, r)
    dropped = sum(r.analysis.collectives_dropped for r in seen.values())
    return verdict([analysis_source(n, r.analysis) for n, r in sorted(seen.items())], dropped)


def straggler_members(found: Verdict) -> dict[str, Any]:
    """The summary's ``stragglers`` and ``collectiveMatching``."""
    return {"stragglers": found.stragglers, "collectiveMatching": found.summary_json()}


def figures_summary(ranks: Sequence[RankFigures]) -> dict[str, Any]:
    """``summary`` from the ranks' figures."""
    timed = sorted(
        ((r.step_time_us, r) for r in ranks if r.step_time_us is not None),
        key=lambda item: (item[0], item[1].file),
    )

    def present(values: list[float | None]) -> list[float]:
        return [value for value in values if value is not None]

    return {
        "rankCount": len(ranks),
        "computePct": _spread(present([r.compute_pct for r in ranks])),
        "nonComputePct": _spread(present([r.non_compute_pct for r in ranks])),
        "idlePct": _spread(present([r.idle_pct for r in ranks])),
        "overlapPct": _spread(present([r.overlap_pct for r in ranks])),
        "stepTimeUs": _spread([step for step, _ in timed], digits=3),
        "slowestRank": timed[-1][1].rank if timed else None,
        "fastestRank": timed[0][1].rank if timed else None,
    }


def traceset_json(
    ranks: Sequence[AnalysedRank],
    kernel_rows: int | None = None,
    *,
    failed: Sequence[tuple[int | None, str, str]] = (),
    analyzed_at: str | None = None,
) -> dict[str, Any]:
    """``{status, reason, analyzedAt, ranks, summary}`` as the API answers them: the analysed
    ranks and the ``failed`` ones (rank, file, reason) in rank order, the summary of the
    analysed ones (None unless ``complete``)."""
    entries = [(r.rank, r.file, r.to_json(kernel_rows)) for r in ranks]
    entries += [(rank, file, entry_head(rank, file, reason)) for rank, file, reason in failed]
    entries.sort(key=lambda e: (e[0] is None, e[0] or 0, e[1]))
    status, reason = outcome(len(ranks), len(failed))
    return {
        "status": status,
        "reason": reason,
        "analyzedAt": analyzed_at,
        "ranks": [entry for _, _, entry in entries],
        "summary": summary(ranks) if status == "complete" else None,
    }
