"""A traceset's analysis: where each rank's GPU time went (the use case is
``analysis_answer.py``; the jobs computing it, ``analysis.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tracestore import schemas
from tracestore.ranks import RANKS_PATTERN
from tracestore.server import analysis_answer
from tracestore.server.deps import API_ERRORS, CallerDep, error_responses

router = APIRouter(prefix="/api/v1", tags=["tracesets"])


class AnalysisResponse(Response):
    media_type = "application/json"


@router.get(
    "/tracesets/{traceset_id}/analysis",
    response_model=schemas.TracesetAnalysis,
    responses=error_responses(
        400,
        404,
        *API_ERRORS,
        s400="A malformed ranks list (it names the piece at fault)",
        s404="No such traceset visible to the caller",
    ),
)
async def get_analysis(
    traceset_id: str,
    caller: CallerDep,
    ranks: Annotated[
        str | None,
        Query(
            description="Ranks and ranges (0-7,12): only the entries of the files of those "
            "ranks (a file whose rank is not known is left out)",
            # Described, not enforced by FastAPI: a bad token is refused before a bad list.
            json_schema_extra={"pattern": RANKS_PATTERN},
        ),
    ] = None,
) -> Response:
    """Where each rank's GPU time went (ANALYTICS.md): per Kineto file its temporal
    breakdown, communication overlap, kind breakdown, kernels, idle time by cause and steps,
    and the summary over ranks. ``pending`` while the analysis jobs run (with the files
    analysed so far); a file that could not be analysed is an entry with its reason."""
    return AnalysisResponse(await caller.run(analysis_answer.analysis_text, traceset_id, ranks))
