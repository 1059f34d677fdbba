"""The listing and search of tracesets (the use case is ``listing.list_tracesets``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tracestore import schemas
from tracestore.server import listing
from tracestore.server.deps import ERROR_RESPONSES, PrincipalDep, ServicesDep
from tracestore.server.listing_query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SCOPES,
    SORT_FIELDS,
    STATUSES,
    parse_list_query,
)

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


def _parameter(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


# Documented here, parsed by listing_query (the workload filters are open-ended names).
_PARAMETERS = [
    _parameter(
        "workspaceId",
        {"type": "string"},
        "Only this workspace's tracesets plus the tenant and public ones (must be a member)",
    ),
    _parameter(
        "status",
        {"type": "string", "enum": list(STATUSES)},
        "Default: every status but deleted; deleted tracesets appear only when asked for",
    ),
    _parameter("scope", {"type": "string", "enum": list(SCOPES)}, "Only this scope"),
    _parameter("search", {"type": "string"}, "Case-insensitive substring of the name"),
    _parameter(
        "sort",
        {"type": "string", "default": "created:desc"},
        f"Comma list of field:direction (asc, desc); fields {', '.join(SORT_FIELDS)}. "
        "Ties are broken by id; tracesets without a rank count come last in both directions",
    ),
    _parameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "Page size",
    ),
    _parameter(
        "next",
        {"type": "string"},
        "pagination.nextCursor of the previous page, with the same sort and filters",
    ),
    _parameter("createdAfter", {"type": "string", "format": "date-time"}, "Inclusive"),
    _parameter("createdBefore", {"type": "string", "format": "date-time"}, "Exclusive"),
    _parameter("minRankCount", {"type": "integer"}, "Inclusive"),
    _parameter("maxRankCount", {"type": "integer"}, "Inclusive"),
    _parameter("minWorldSize", {"type": "integer"}, "Inclusive; the world size inspection found"),
    _parameter("maxWorldSize", {"type": "integer"}, "Inclusive; the world size inspection found"),
    _parameter(
        "inspected.gpu_model",
        {"type": "string"},
        "A fact inspection derived (inspection.summary), case-insensitive: a GPU model matches "
        "its whole name or any word of it (H100 finds NVIDIA H100 80GB HBM3). The same for "
        "inspected.backend (nccl), inspected.format (kineto_json, chakra_et ...), "
        "inspected.nccl_version; inspected.world_size is an integer",
    ),
    _parameter(
        "workload_family",
        {"type": "string"},
        "A workload filter. Any dotted snake_case path of workloadMetadata works the same way "
        "(workload_name, precision, shape.global_batch_size, parallelism.tp ...): JSON-typed "
        "equality, the value read as a JSON number, true, false, null or quoted string when it "
        'is one (1024 matches the number, "1024" with quotes the string), else as a string',
    ),
]


@router.get(
    "/tracesets",
    response_model=schemas.TracesetPage,
    tags=["tracesets"],
    openapi_extra={"parameters": _PARAMETERS},
)
def list_tracesets(
    request: Request, services: ServicesDep, principal: PrincipalDep
) -> schemas.TracesetPage:
    """List and search the tracesets the caller may see, one page at a time (newest first by
    default); filter by status, scope, name, dates, rank count and workload metadata."""
    query = parse_list_query(request.query_params.multi_items())
    return listing.list_tracesets(services, principal, query)
