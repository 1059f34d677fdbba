"""A traceset's analysis: where each rank's GPU time went (the use case is
``analysis_answer.py``; the jobs computing it, ``analysis.py``), and the comparison of two
(``comparison.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from tracestore import schemas
from tracestore.ranks import RANKS_PATTERN
from tracestore.server import analysis_answer, comparison
from tracestore.server.deps import API_ERRORS, CallerDep, authenticated, error_responses

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


def _selection(alias: str, what: str) -> Any:
    return Query(
        alias=alias,
        description=what,
        # Described, not enforced by FastAPI: a bad token is refused before a bad list.
        json_schema_extra={"pattern": RANKS_PATTERN},
    )


@router.get(
    "/tracesets/{traceset_id}/compare",
    # The token checked before the query's required `with`: a caller without a valid token
    # learns that first (401), as on every other route, not how to phrase the request.
    dependencies=[Depends(authenticated)],
    response_model=schemas.TracesetComparison,
    responses=error_responses(
        400,
        404,
        409,
        *API_ERRORS,
        s400="A malformed selection (it names the parameter and the piece at fault), a "
        "selection that chooses no analysed rank, or ranks in different numbers on each side",
        s404="Either traceset is not visible to the caller",
        s409="An analysis is not complete (pending, failed, none), the two hold no rank in "
        "common, or a chosen rank's per-step kernel totals were not kept",
    ),
)
async def compare_tracesets(
    traceset_id: str,
    caller: CallerDep,
    with_: Annotated[str, Query(alias="with", description="The other traceset's id")],
    base_ranks: Annotated[
        str | None,
        _selection(
            "baseRanks",
            "Ranks of the base (this traceset) to compare, e.g. 0-7,12 (default: the ranks "
            "both hold, or the one rank each holds; one side's list serves both)",
        ),
    ] = None,
    other_ranks: Annotated[
        str | None,
        _selection("otherRanks", "Ranks of the other traceset, met in order with baseRanks' ranks"),
    ] = None,
    steps: Annotated[
        str | None,
        _selection(
            "steps", "ProfilerStep numbers whose kernels count, e.g. 3-5 (default: every step)"
        ),
    ] = None,
) -> schemas.TracesetComparison:
    """What changed between two tracesets (ANALYTICS.md): per kernel name the calls and
    total duration on each side with the differences, slower first; the names added,
    deleted, called more, less or as often; per rank pair the differences of the temporal
    breakdown, overlap and median step time. Computed from the stored analyses: a 409 while
    one is not complete."""
    answer = await caller.run(
        comparison.compare_tracesets,
        traceset_id,
        with_,
        base_ranks=base_ranks,
        other_ranks=other_ranks,
        steps=steps,
    )
    return schemas.TracesetComparison.model_validate(answer)
