"""The traceset's ``summary``: medians, least and greatest over its ranks (ANALYTICS.md).

``stragglers`` is issue 45's and is not computed here; the summary leaves the member out.
A rank's step time is the median duration of its steps (a truncated last step left out);
ranks without steps, or without communication for ``overlapPct``, do not count for that
number.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracestore.analysis.model import RankAnalysis, us


@dataclass(frozen=True)
class AnalysedRank:
    """One analysed Kineto file of a traceset."""

    rank: int | None
    file: str
    analysis: RankAnalysis

    def to_json(self, kernel_rows: int | None = None) -> dict[str, Any]:
        """The API's entry of ``ranks``: ``{rank, file, temporal, overlap, kindBreakdown,
        kernels, idle, steps}``."""
        kept = {} if kernel_rows is None else {"kernel_rows": kernel_rows}
        return {"rank": self.rank, "file": self.file, **self.analysis.to_json(**kept)}


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
    fastestRank}``; each of the five a ``{median, min, max}``."""
    temporal = [r.analysis.temporal.to_json() for r in ranks]
    step_ns = [(r.analysis.median_step_ns, r) for r in ranks]
    timed = sorted(
        ((ns, r) for ns, r in step_ns if ns is not None),
        key=lambda item: (item[0], item[1].file),
    )
    step_us = [us(ns) for ns, _ in timed]
    overlap = [p for r in ranks if (p := r.analysis.overlap.pct) is not None]
    return {
        "rankCount": len(ranks),
        "computePct": _spread([t["computePct"] for t in temporal if t["computePct"] is not None]),
        "nonComputePct": _spread(
            [t["nonComputePct"] for t in temporal if t["nonComputePct"] is not None]
        ),
        "idlePct": _spread([t["idlePct"] for t in temporal if t["idlePct"] is not None]),
        "overlapPct": _spread(overlap),
        "stepTimeUs": _spread(step_us, digits=3),
        "slowestRank": timed[-1][1].rank if timed else None,
        "fastestRank": timed[0][1].rank if timed else None,
    }


def traceset_json(ranks: Sequence[AnalysedRank], kernel_rows: int | None = None) -> dict[str, Any]:
    """``{ranks, summary}`` as the API answers them, ranks in rank order."""
    ordered = sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.file))
    return {
        "ranks": [r.to_json(kernel_rows) for r in ordered],
        "summary": summary(ordered),
    }
