"""Where each rank's GPU time went: the per-rank analyses of ANALYTICS.md, streaming.

Pure code beside ``inspect`` (no server imports). One pass over a Kineto file keeps a
compact record per device event and per launch (``kineto_events``, ``rank``); the records
are sorted after the pass, spilling to disk past ``Limits.sort_memory`` (``extsort``), and
the numbers come out of one sweep (``rank``). ``files.analyze_path`` analyses a local file,
``summary`` the ranks of a traceset; ``model`` holds the results and their JSON.
"""

from __future__ import annotations

from tracestore.analysis.files import (
    FileOutcome,
    RankTap,
    analyze_opened,
    analyze_path,
    analyze_stream,
    open_trace,
)
from tracestore.analysis.kineto_events import KinetoEvents
from tracestore.analysis.model import KernelStats, RankAnalysis
from tracestore.analysis.rank import AnalysisError, Limits, RankCollector
from tracestore.analysis.summary import AnalysedRank, RankFigures, summary, traceset_json

__all__ = [
    "AnalysedRank",
    "AnalysisError",
    "FileOutcome",
    "KernelStats",
    "KinetoEvents",
    "Limits",
    "RankAnalysis",
    "RankCollector",
    "RankFigures",
    "RankTap",
    "analyze_opened",
    "analyze_path",
    "analyze_stream",
    "open_trace",
    "summary",
    "traceset_json",
]
