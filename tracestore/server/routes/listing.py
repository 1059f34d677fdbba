"""The listing and search of tracesets (the use case is ``pages.list_page``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from tracestore import schemas
from tracestore.choices import CENSUS_VERDICTS, STATUSES
from tracestore.schemas import wire
from tracestore.server.deps import API_ERRORS, CallerDep, error_responses
from tracestore.server.deps import query_parameter as _parameter
from tracestore.server.listing import pages
from tracestore.server.listing.query import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_WORKLOAD_FILTERS,
    PERCENT_PATTERN,
    SCOPES,
    SORT_FIELDS,
    sort_pattern,
)

router = APIRouter(prefix="/api/v1")


# Documented here, parsed by listing_query (the workload filters are open-ended names).
NUL_FREE = {"type": "string", **wire.NUL_FREE}  # no name can hold a U+0000
COUNT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
FACT = {"type": "string", "pattern": "\\S"}  # not empty nor only spaces
PERCENT = {"type": "string", "pattern": PERCENT_PATTERN}  # 0 to 100
_PARAMETERS = [
    _parameter(
        "workspaceId",
        {"type": "string", "minLength": 1},
        "Only this workspace's tracesets plus the tenant and public ones (must be a member)",
    ),
    _parameter(
        "status",
        {"type": "string", "enum": list(STATUSES)},
        "Default: every status but deleted; deleted tracesets appear only when asked for",
    ),
    _parameter("scope", {"type": "string", "enum": list(SCOPES)}, "Only this scope"),
    _parameter("search", NUL_FREE, "Case-insensitive substring of the name"),
    _parameter(
        "sort",
        {"type": "string", "default": "created:desc", "pattern": sort_pattern()},
        f"Comma list of field:direction (asc, desc); fields {', '.join(SORT_FIELDS)}. "
        "Ties are broken by id; tracesets without a rank count come last in both directions; "
        "step_time is the analysis's median step time (ties, and the tracesets without one, "
        "which come last in both directions, in creation order)",
    ),
    _parameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "Page size",
    ),
    _parameter(
        "next",
        {"type": "string", "pattern": CURSOR_PATTERN},
        "pagination.nextCursor of the previous page, with the same sort and filters",
    ),
    _parameter("createdAfter", {"type": "string", "format": "date-time"}, "Inclusive"),
    _parameter("createdBefore", {"type": "string", "format": "date-time"}, "Exclusive"),
    _parameter("minRankCount", COUNT, "Inclusive"),
    _parameter("maxRankCount", COUNT, "Inclusive"),
    _parameter("minWorldSize", COUNT, "Inclusive; the world size inspection found"),
    _parameter("maxWorldSize", COUNT, "Inclusive; the world size inspection found"),
    _parameter(
        "minIdlePct",
        PERCENT,
        "Inclusive, 0 to 100: the analysis summary's median idle percentage (idlePct.median)",
    ),
    _parameter("maxIdlePct", PERCENT, "Inclusive, 0 to 100: idlePct.median of the analysis"),
    _parameter(
        "minOverlapPct",
        PERCENT,
        "Inclusive, 0 to 100: the analysis summary's median communication overlap "
        "(overlapPct.median)",
    ),
    _parameter(
        "census",
        {"type": "string", "enum": list(CENSUS_VERDICTS)},
        "The rank census's verdict (an extension): fail finds the incomplete tracesets (ranks "
        "missing, duplicated or unranked, degrees or groups that disagree), unknown those not "
        "inspected yet",
    ),
    _parameter(
        "inspected.gpu_model",
        FACT,
        "A fact inspection derived (inspection.summary), case-insensitive: a GPU model matches "
        "its whole name or any word of it (H100 finds NVIDIA H100 80GB HBM3)",
    ),
    _parameter("inspected.backend", FACT, "A communication backend found (nccl, gloo)"),
    _parameter(
        "inspected.format",
        FACT,
        "A trace format found (kineto_json, pytorch_et_json, chakra_et ...)",
    ),
    _parameter("inspected.nccl_version", FACT, "An NCCL version recorded"),
    _parameter(
        "inspected.world_size",
        {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "The world size inspection found",
    ),
]


# The workload filters a generated client can send by name; any other dotted snake_case path
# of workloadMetadata filters the same way (listing_query reads every unknown name as one).
_WORKLOAD_FILTER_RULE = (
    "JSON-typed equality on this member of workloadMetadata: the value is read as a JSON "
    "number, true, false, null or quoted string when it is one (1024 matches the number, "
    '"1024" with the quotes the string), else as a string. Any other dotted snake_case path '
    "of workloadMetadata (model_name, shape.seq_len, parallelism.pp ...) filters the same "
    f"way, up to {MAX_WORKLOAD_FILTERS} workload filters in all"
)
_WORKLOAD_PARAMETERS = [
    _parameter(path, {"type": "string"}, f"{what}. {_WORKLOAD_FILTER_RULE}")
    for path, what in (
        ("workload_family", "The workload family (e.g. llm)"),
        ("workload_name", "The workload's name"),
        ("precision", "The numeric precision (e.g. bf16)"),
        ("accelerator", "The accelerator (e.g. h100)"),
        ("shape.global_batch_size", "The global batch size"),
        ("parallelism.tp", "The tensor parallelism degree"),
        ("parallelism.dp", "The data parallelism degree"),
    )
]


@router.get(
    "/tracesets",
    response_model=schemas.TracesetPage,
    tags=["tracesets"],
    openapi_extra={"parameters": _PARAMETERS + _WORKLOAD_PARAMETERS},
    responses=error_responses(
        400, 403, *API_ERRORS, s403="workspaceId names a workspace the caller is not a member of"
    ),
)
async def list_tracesets(request: Request, caller: CallerDep) -> Response:
    """List and search the tracesets the caller may see, one page at a time (newest first by
    default); filter by status, scope, name, dates, rank count, workload metadata, what
    inspection found and the analysis summary (idle and overlap percentages; sort by step
    time)."""
    answer = await caller.read(pages.list_page, request.query_params.multi_items())
    return Response(answer, media_type="application/json")
