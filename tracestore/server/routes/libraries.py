"""Libraries: the content-addressed content tracesets share (the use cases are
``libraries.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from tracestore import schemas
from tracestore.server import libraries
from tracestore.server.auth import Principal
from tracestore.server.deps import (
    API_ERRORS,
    CallerDep,
    error_responses,
    query_parameter,
)
from tracestore.server.listing.query import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SCOPES,
    sort_pattern,
)
from tracestore.server.services import Services

router = APIRouter(prefix="/api/v1", tags=["libraries"])


_PARAMETERS = [
    query_parameter(
        "workspaceId",
        {"type": "string", "minLength": 1},
        "Only libraries held by this workspace's tracesets",
    ),
    query_parameter(
        "scope", {"type": "string", "enum": list(SCOPES)}, "Only libraries of this (widest) scope"
    ),
    query_parameter(
        "search",
        {"type": "string"},
        "A hex prefix of the content hash, a substring of a holding traceset's name, or its "
        "workload_family or workload_name",
    ),
    query_parameter(
        "sort",
        {
            "type": "string",
            "default": "created:desc",
            "pattern": sort_pattern(libraries.SORT_FIELDS),
        },
        f"Comma list of field:direction (asc, desc); fields {', '.join(libraries.SORT_FIELDS)}",
    ),
    query_parameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "Page size",
    ),
    query_parameter(
        "next",
        {"type": "string", "pattern": CURSOR_PATTERN},
        "pagination.nextCursor of the previous page",
    ),
    query_parameter("createdAfter", {"type": "string", "format": "date-time"}, "Inclusive"),
    query_parameter("createdBefore", {"type": "string", "format": "date-time"}, "Exclusive"),
]


@router.get(
    "/libraries",
    response_model=schemas.LibraryPage,
    openapi_extra={"parameters": _PARAMETERS},
    responses=error_responses(
        400, 403, *API_ERRORS, s403="workspaceId names a workspace the caller is not a member of"
    ),
)
async def list_libraries(request: Request, caller: CallerDep) -> schemas.LibraryPage:
    """List the libraries the caller may see: the content-addressed content its tracesets
    hold, identical uploads sharing one (newest first by default)."""
    return await caller.run(_page, request.query_params.multi_items())


@router.get(
    "/libraries/{library_id}",
    response_model=schemas.Library,
    responses=error_responses(
        300,
        400,
        404,
        *API_ERRORS,
        s300="The hash prefix matches several libraries; the message names them",
        s400="The hash prefix is shorter than 8 characters",
    ),
)
async def get_library(
    library_id: Annotated[
        str,
        # Described, not checked here: the use case words a short hash prefix (400), and
        # any other short reference is an unknown library (404).
        Path(json_schema_extra={"minLength": libraries.MIN_PREFIX}),
    ],
    caller: CallerDep,
) -> schemas.Library:
    """A library by its ``lib_`` id or a hex prefix (8 or more characters) of its content
    hash, with its files and the tracesets the caller may see that hold it."""
    return await caller.run(libraries.get_library, library_id)


def _page(
    services: Services, principal: Principal, parameters: list[tuple[str, str]]
) -> schemas.LibraryPage:
    # Parsed after the token is checked: a bad token is a 401 whatever the query says.
    return libraries.list_libraries(services, principal, libraries.parse_library_query(parameters))
