"""Use case: ``GET /api/v1/tracesets/{id}/compare?with={other}``, the comparison of two
tracesets (ANALYTICS.md) from their stored analyses, no file read again.

Each chosen rank's side comes from what its file's job stored: the analysis's JSON (its
temporal breakdown, overlap and steps) and its detail (per-step kernel totals, the totals
of kernels launched in no step; ``analysis.detail_blob``). A traceset whose analysis is not
complete, or a chosen rank whose detail was not kept, is a Conflict that says so.
"""

from __future__ import annotations

import zlib
from typing import Any

from sqlalchemy import select

from tracestore.analysis.compare import Comparison, answer, pair_ranks, stored_side
from tracestore.errors import Conflict, NotFound
from tracestore.ranks import Runs, parse_ranks
from tracestore.server import db
from tracestore.server.analysis import SETTING
from tracestore.server.auth import Principal
from tracestore.server.services import Services
from tracestore.server.stored_json import members

T, A, F = db.Traceset, db.TracesetAnalysis, db.FileAnalysis
CHUNK = 500  # positions per IN list


def compare_tracesets(
    services: Services,
    principal: Principal,
    base_id: str,
    other_id: str,
    base_ranks: str | None = None,
    other_ranks: str | None = None,
    steps: str | None = None,
) -> dict[str, Any]:
    """The comparison object (``schemas.TracesetComparison``'s members); NotFound unless the
    caller may see both, ValidationError for a bad selection, Conflict when an analysis is
    not complete or holds nothing to compare."""
    base_runs = _runs(base_ranks, "baseRanks")
    other_runs = _runs(other_ranks, "otherRanks")
    step_runs = None if steps is None else parse_ranks(steps, "steps", "step")
    with services.db.session(write=False) as session:
        files = [_files(session, principal, traceset_id) for traceset_id in (base_id, other_id)]
        pairs = pair_ranks(
            [rank for _, rank, _ in files[0]],
            [rank for _, rank, _ in files[1]],
            base_runs,
            other_runs,
        )
        chosen = [
            _stored(session, base_id, [files[0][i] for i, _ in pairs]),
            _stored(session, other_id, [files[1][j] for _, j in pairs]),
        ]
    comparison = Comparison(step_runs)
    for (b_rank, b_file, b_row), (o_rank, o_file, o_row) in zip(*chosen, strict=True):
        comparison.add(_side(b_rank, b_file, b_row), _side(o_rank, o_file, o_row))
        b_row.clear()  # each pair's text and detail go once added
        o_row.clear()
    ranks = [(b[0], o[0]) for b, o in zip(*chosen, strict=True)]
    return answer(base_id, other_id, ranks, step_runs, comparison)


def _runs(text: str | None, name: str) -> Runs | None:
    return None if text is None else parse_ranks(text, name)


def _files(
    session: Any, principal: Principal, traceset_id: str
) -> list[tuple[int, int | None, str]]:
    """The traceset's analysed files (position, rank, name), in rank order; NotFound unless
    the caller may see it, Conflict unless its analysis is complete."""
    traceset = session.execute(
        select(T.tenant_id, T.workspace_id, T.scope, T.status).where(T.id == traceset_id)
    ).first()
    if traceset is None or not principal.may_see(*traceset[:3]):
        raise NotFound(f"Traceset '{traceset_id}' not found")
    state = session.execute(select(A.status, A.reason).where(A.traceset_id == traceset_id)).first()
    if state is None or state[0] != "complete":
        status, reason = state or ("none", "it was never analysed")
        detail = f" ({reason})" if reason else ""
        if status == "pending":
            detail = ": compare once it is complete"
        raise Conflict(f"Traceset '{traceset_id}' has no complete analysis: it is {status}{detail}")
    rows = session.execute(
        select(F.position, F.rank, F.file)
        .where(F.traceset_id == traceset_id, F.status == "complete")
        .order_by(F.rank.is_(None), F.rank, F.position)
    ).all()
    return [(position, rank, file) for position, rank, file in rows]


def _stored(
    session: Any, traceset_id: str, files: list[tuple[int, int | None, str]]
) -> list[tuple[int | None, str, dict[str, Any]]]:
    """The chosen files' stored analysis text and detail, in the order given."""
    found: dict[int, dict[str, Any]] = {}
    positions = [position for position, _, _ in files]
    for start in range(0, len(positions), CHUNK):
        rows = session.execute(
            select(F.position, F.analysis_text, F.detail).where(
                F.traceset_id == traceset_id, F.position.in_(positions[start : start + CHUNK])
            )
        ).all()
        for position, text, detail in rows:
            found[position] = {"text": text, "detail": detail, "traceset": traceset_id}
    return [(rank, file, found[position]) for position, rank, file in files]


def _side(rank: int | None, file: str, row: dict[str, Any]) -> Any:
    if row["detail"] is None or not row["text"]:
        raise Conflict(
            f"Traceset '{row['traceset']}': the per-step kernel totals of {file} were not "
            f"kept (larger than its share of {SETTING}): compare it locally (tracestore "
            "compare PATH PATH)"
        )
    detail = members(zlib.decompress(row["detail"]).decode(), DETAIL_MEMBERS)
    return stored_side(rank, file, members(row["text"], ANALYSIS_MEMBERS), detail)


ANALYSIS_MEMBERS = ("temporal", "overlap", "steps")
DETAIL_MEMBERS = ("names", "stepKernels", "unstepped")
