"""Use case: a traceset's analysis as ``GET /api/v1/tracesets/{id}/analysis`` answers it.

The answer is written as JSON text from what the jobs stored as text (each file's analysis,
the summary), spliced in unparsed: a 1,024-rank answer is megabytes, and parsing it per
request would cost more than reading it. ``?ranks=0-7,12`` keeps the files of those ranks
(``tracestore.ranks``: the list people write for downloads too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.sql import Select

from tracestore.errors import NotFound
from tracestore.ranks import overlaps, parse_ranks
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.services import Services

T, A, F = db.Traceset, db.TracesetAnalysis, db.FileAnalysis


def _columns(*columns: Any) -> list[Any]:
    return list(columns)  # a select of a list is a Select[Any], as Reads takes it


_TRACESET: Select[Any] = select(*_columns(T.tenant_id, T.workspace_id, T.scope, T.status)).where(
    T.id == bindparam("traceset_id")
)
_STATE: Select[Any] = select(*_columns(A.status, A.reason, A.analyzed_at, A.summary_text)).where(
    A.traceset_id == bindparam("traceset_id")
)
_ORDER = (F.rank.is_(None), F.rank, F.position)
_FILES: Select[Any] = (
    select(*_columns(F.rank, F.file, F.status, F.reason, F.analysis_text))
    .where(F.traceset_id == bindparam("traceset_id"))
    .order_by(*_ORDER)
)
# With ?ranks=: the files whose rank lies in the list's span (those between its runs are
# dropped as they are read).
_FILES_IN_SPAN: Select[Any] = (
    select(*_columns(F.rank, F.file, F.status, F.reason, F.analysis_text))
    .where(
        F.traceset_id == bindparam("traceset_id"),
        F.rank >= bindparam("low"),
        F.rank <= bindparam("high"),
    )
    .order_by(*_ORDER)
)

# What a traceset without an analysis record answers, by its status.
_UNRECORDED = {
    "uploading": ("pending", "the upload is not complete: the analysis runs once it is"),
    "upload_failed": ("none", "the upload failed"),
}
_BEFORE = "the traceset was stored before this service analysed traces"


def analysis_text(
    services: Services, principal: Principal, traceset_id: str, ranks: str | None = None
) -> str:
    """The traceset's analysis as the API answers it (``schemas.TracesetAnalysis``), as JSON
    text; NotFound unless the caller may see the traceset, ValidationError for a bad
    ``ranks`` list."""
    runs = None if ranks is None else parse_ranks(ranks)
    key: dict[str, Any] = {"traceset_id": traceset_id}
    with services.db.read_connection() as reads:
        traceset = reads.first(_TRACESET, key)
        if traceset is None or not principal.may_see(*traceset[:3]):
            raise NotFound(f"Traceset '{traceset_id}' not found")
        state = reads.first(_STATE, key)
        if runs is None:
            files = reads.all(_FILES, key)
        else:
            files = reads.all(_FILES_IN_SPAN, {**key, "low": runs[0][0], "high": runs[-1][1]})
    if state is None:
        status, reason = _UNRECORDED.get(traceset[3], ("none", _BEFORE))
        return answer_text(status, reason, None, [], None)
    status, reason, analyzed_at, summary = state
    chosen = [f for f in files if runs is None or overlaps(runs, f[0], f[0])]
    when = None if analyzed_at is None else db.timestamp_text(analyzed_at)
    return answer_text(status, reason, when, chosen, summary)


def answer_text(
    status: str,
    reason: str | None,
    analyzed_at: str | None,
    files: Sequence[Sequence[Any]],
    summary: str | None,
) -> str:
    """The answer's JSON text from the stored rows (``_FILES``: rank, file, status, reason,
    the analysis's text) and the summary's text, neither parsed. Members in the models'
    order; tests/test_analysis_service.py holds it to them."""
    entries = ",".join(entry_text(*row) for row in files)
    head = _json({"status": status, "reason": reason, "analyzedAt": analyzed_at})
    return f'{head[:-1]},"ranks":[{entries}],"summary":{summary or "null"}}}'


def entry_text(
    rank: int | None, file: str, status: str, reason: str | None, text: str | None
) -> str:
    """One entry of ``ranks``: its head, and a complete one's stored analysis after it."""
    head = _json({"rank": rank, "file": file, "status": status, "reason": reason})
    if status != "complete" or not text:
        return head
    return f"{head[:-1]},{text[1:]}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
