"""Use case: which rank held the others back (ANALYTICS.md, "Stragglers"), from the
traceset's stored analyses.

The assembly (``file_jobs.py``) asks for the verdict before its write (``straggler_verdict``):
each analysed file's stored collectives (``COLLECTIVE_MEMBERS`` of its detail, decoded alone)
and its steps' computation, one file at a time in one read transaction. validate's
``stragglers`` check reads the stored summary (``stragglers_check``).
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from tracestore.analysis.stragglers import (
    NO_STEPS,
    CollectiveColumns,
    RankSource,
    Verdict,
    verdict,
)
from tracestore.server import db
from tracestore.server.services import Services
from tracestore.server.stored_json import members

log = logging.getLogger("tracestore.analysis")


def straggler_verdict(services: Services, traceset_id: str) -> Verdict:
    """The stragglers among the traceset's analysed files, from their stored detail (the
    collectives) and steps, read one file at a time in one read transaction. A file's rank
    as ``assemble`` takes it: the census's when the file holds one rank, else the one its
    analysis recorded. A stored text that cannot be read back leaves the summary without
    stragglers, saying why, rather than failing the summary."""
    try:
        return _straggler_verdict(services, traceset_id)
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        log.exception("no straggler verdict for %s", traceset_id)
        found = verdict([])
        why = "its compressed detail is damaged" if isinstance(exc, zlib.error) else repr(exc)
        found.failure = f"a stored analysis could not be read back: {why}"
        return found


def _straggler_verdict(services: Services, traceset_id: str) -> Verdict:
    F, TF = db.FileAnalysis, db.TracesetFile
    with services.db.session(write=False) as session:
        rows = session.execute(
            select(F.position, F.rank, TF.rank_start, TF.rank_end)
            .join(TF, (TF.traceset_id == F.traceset_id) & (TF.position == F.position))
            .where(F.traceset_id == traceset_id, F.status == "complete")
            .order_by(F.position)
        ).all()
        sources: dict[int, RankSource] = {}
        dropped: list[int] = []  # per file, counted as its collectives are first read
        for position, recorded, start, end in rows:
            rank = start if start is not None and start == end else recorded
            if rank is None or rank in sources:
                continue
            text = session.scalar(
                select(F.analysis_text).where(F.traceset_id == traceset_id, F.position == position)
            )
            read = _stored_collectives(session, traceset_id, position, dropped)
            sources[rank] = RankSource(rank, read, _stored_steps(text))
        found = verdict([sources[rank] for rank in sorted(sources)])
    found.dropped = sum(dropped)
    return found


def _stored_steps(text: str | None) -> list[tuple[int, int]]:
    """A stored analysis's computation per step (``stragglers.step_compute``)."""
    body = json.loads(text) if text else {}
    steps = body.get("steps") or []
    if not steps:
        compute = (body.get("temporal") or {}).get("computeTimeUs")
        return [] if compute is None else [(NO_STEPS, round(compute * 1000))]
    return [(s["step"], round(s["computeUs"] * 1000)) for s in steps if not s.get("truncated")]


_NO_COLLECTIVES = CollectiveColumns([], [], [], [], [])
_DETAIL = select(db.FileAnalysis.detail).where(
    db.FileAnalysis.traceset_id == bindparam("traceset_id"),
    db.FileAnalysis.position == bindparam("position"),
)


def _stored_collectives(
    session: Session, traceset_id: str, position: int, dropped: list[int]
) -> Callable[[], CollectiveColumns]:
    """A file's stored collectives, read again at each call (none when no detail was kept);
    the first call appends to ``dropped`` how many its analysis did not keep."""
    calls = [0]

    def read() -> CollectiveColumns:
        calls[0] += 1
        blob = session.scalar(_DETAIL, {"traceset_id": traceset_id, "position": position})
        detail = stored_collectives(blob)
        if calls[0] == 1:
            dropped.append(0 if detail is None else detail.get("collectivesDropped", 0))
        if detail is None:
            return _NO_COLLECTIVES
        table = detail["collectives"]
        return CollectiveColumns(
            detail["processGroups"],
            table["processGroup"],
            table["sequence"],
            table["startNs"],
            table["durationNs"],
        )

    return read


# What the straggler pass reads of a file's stored detail: not its per-step kernel totals.
COLLECTIVE_MEMBERS = ("processGroups", "collectivesDropped", "collectives")


def stored_collectives(blob: bytes | None) -> dict[str, Any] | None:
    """The members of a file's stored detail the straggler pass reads (``COLLECTIVE_MEMBERS``),
    each decoded alone (``stored_json.members``), or None when no detail was kept."""
    return None if blob is None else members(zlib.decompress(blob).decode(), COLLECTIVE_MEMBERS)


MAX_STRAGGLERS_NAMED = 8  # in validate's message; the rest are counted


def stragglers_check(state: db.TracesetAnalysis | None) -> dict[str, Any]:
    """validate's ``stragglers`` check from the stored summary: a warning naming the
    stragglers and why, passed without one, not evaluated before the analysis is complete
    (or stored before the service looked for stragglers). Never makes the set invalid."""
    summary = None
    if state is not None and state.status == "complete" and state.summary_text:
        summary = json.loads(state.summary_text)
    if summary is None or "stragglers" not in summary:
        why = "the traceset's analysis has not finished"
        if state is not None and state.status in ("none", "failed"):
            why = "the traceset holds no analysed Kineto trace"
        elif summary is not None:
            why = "the analysis was stored before the service looked for stragglers"
        return {"name": "stragglers", "passed": None, "message": f"Not evaluated: {why}"}
    found = summary["stragglers"]
    matched = (summary.get("collectiveMatching") or {}).get("matched", 0)
    if not found:
        return {
            "name": "stragglers",
            "passed": True,
            "message": f"no straggler among {summary['rankCount']} ranks "
            f"({matched} collectives matched)",
        }
    named = [entry["reason"] for entry in found[:MAX_STRAGGLERS_NAMED]]
    more = len(found) - len(named)
    text = "; ".join(named) + (f"; and {more} more" if more else "")
    plural = "s" if len(found) > 1 else ""
    return {
        "name": "stragglers",
        "passed": True,
        "warning": True,
        "message": f"{len(found)} straggler{plural}: {text}",
    }
