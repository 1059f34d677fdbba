"""A list query's plan: its shape (what the SELECT depends on: which filters, which sort,
how many visibility arms) and the values of its bind parameters. ``listing_sql`` builds,
and keeps, one SELECT per shape."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from tracestore.server.auth import Principal
from tracestore.server.listing.query import ME, ListQuery, SortKey, WorkloadFilter

# Beyond this many workspaces one IN arm replaces an arm per workspace.
MAX_WORKSPACE_ARMS = 16


@dataclass(frozen=True)
class Shape:
    """Everything a statement depends on; values travel separately as bind parameters."""

    dialect: str
    sort: tuple[SortKey, ...]
    workspace_arms: int  # -1: one arm with an IN list
    tenant_arm: bool
    public_arm: bool
    status: bool
    search: bool
    created_after: bool
    created_before: bool
    min_rank_count: bool
    max_rank_count: bool
    min_world_size: bool
    max_world_size: bool
    min_idle_pct: bool
    max_idle_pct: bool
    min_overlap_pct: bool
    census: str | None  # "unknown" (no verdict recorded), "recorded" (bound as census), None
    inspected: tuple[str, ...]  # the facts filtered on, in order (values are f0, f1 ...)
    uploaded_by: bool
    tags: int  # how many tag filters (values are g0, g1 ...)
    workload: tuple[tuple[tuple[str, ...], str], ...]  # (path, kind of value)
    contradictory: bool  # two workload filters on a member and on a member inside it
    after: bool
    # With step_time first in the sort: whether the cursor is past every traceset with a
    # step time (the page then holds only tracesets without one).
    after_missing_step: bool = False
    # The first tag (g0) is rare (``rare_tags.RARE_TAG``): the page starts from its tracesets
    # rather than walking the sort's order until a page of them is found.
    tag_driven: bool = False


def _census_kind(verdict: str) -> str:
    return "unknown" if verdict == "unknown" else "recorded"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "text" if isinstance(value, str) else "number"


def _sqlite_number(value: Any) -> Any:
    """A workload filter's value as SQLite can bind it: an integer beyond 64 bits (which
    sqlite3 refuses to bind) as the float SQLite's json_extract reads such a stored
    integer as; anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        try:
            return float(value)
        except OverflowError:  # beyond floats too: json_extract reads it as infinite
            return math.inf if value > 0 else -math.inf
    return value


def _containment_document(filters: tuple[WorkloadFilter, ...]) -> dict[str, Any] | None:
    """The filters as one nested document, or None when two of them contradict."""
    document: dict[str, Any] = {}
    for item in filters:
        node = document
        for segment in item.path[:-1]:
            child = node.setdefault(segment, {})
            if not isinstance(child, dict):
                return None
            node = child
        if item.path[-1] in node:
            return None
        node[item.path[-1]] = item.value
    return document


def uploader_id(principal: Principal, uploaded_by: str) -> str:
    """The user an ``uploadedBy`` filter names: ``me`` is the caller."""
    return principal.user_id if uploaded_by == ME else uploaded_by


def _workspaces(principal: Principal, query: ListQuery) -> list[str]:
    if query.scope not in (None, "workspace"):
        return []
    return [query.workspace_id] if query.workspace_id else sorted(principal.workspace_ids)


def plan(
    principal: Principal,
    query: ListQuery,
    dialect: str,
    after: list[Any] | None,
    rare_tag: str | None = None,
) -> tuple[Shape, dict[str, Any]]:
    """The query's shape and the values of its bind parameters; ``rare_tag``, one of the
    query's tags, drives the page (``Shape.tag_driven``)."""
    if rare_tag is not None:
        query = replace(query, tags=(rare_tag, *(tag for tag in query.tags if tag != rare_tag)))
    values: dict[str, Any] = {"fetch": query.limit + 1, "tenant": principal.tenant_id}
    workspaces = _workspaces(principal, query)
    if len(workspaces) > MAX_WORKSPACE_ARMS:
        values["ws_in"] = workspaces
    else:
        values.update((f"ws{i}", ws) for i, ws in enumerate(workspaces))
    if query.status:
        values["status"] = query.status
    if query.search and dialect == "postgresql":
        escaped = query.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        values["search"] = f"%{escaped}%"
    elif query.search:
        values["search"] = query.search.lower()
    optional = {
        "created_after": query.created_after,
        "created_before": query.created_before,
        "min_rank_count": query.min_rank_count,
        "max_rank_count": query.max_rank_count,
        "min_world_size": query.min_world_size,
        "max_world_size": query.max_world_size,
        "min_idle_pct": query.min_idle_pct,
        "max_idle_pct": query.max_idle_pct,
        "min_overlap_pct": query.min_overlap_pct,
    }
    values.update((k, v) for k, v in optional.items() if v is not None)
    values.update((f"f{i}", item.value) for i, item in enumerate(query.inspected))
    values.update((f"g{i}", tag) for i, tag in enumerate(query.tags))
    if query.uploaded_by is not None:
        values["uploaded_by"] = uploader_id(principal, query.uploaded_by)
    if query.census in ("pass", "fail"):
        values["census"] = query.census
    for i, item in enumerate(query.workload):
        if dialect != "postgresql" and _kind(item.value) in ("text", "number"):
            values[f"w{i}"] = _sqlite_number(item.value)
    document = _containment_document(query.workload)
    if dialect == "postgresql" and query.workload and document is not None:
        values["wdoc"] = json.dumps(document, ensure_ascii=False)
    if after is not None:
        values.update(_atom_values(query.sort, after))
    shape = Shape(
        dialect=dialect,
        sort=query.sort,
        workspace_arms=-1 if len(workspaces) > MAX_WORKSPACE_ARMS else len(workspaces),
        tenant_arm=query.scope in (None, "tenant"),
        public_arm=query.scope in (None, "public"),
        status=query.status is not None,
        search=bool(query.search),
        **{k: v is not None for k, v in optional.items()},
        census=None if query.census is None else _census_kind(query.census),
        inspected=tuple(item.fact for item in query.inspected),
        uploaded_by=query.uploaded_by is not None,
        tags=len(query.tags),
        workload=tuple((item.path, _kind(item.value)) for item in query.workload),
        contradictory=document is None,
        after=after is not None,
        after_missing_step=(
            after is not None and query.sort[0].field == "step_time" and after[0][0] is None
        ),
        tag_driven=rare_tag is not None,
    )
    return shape, values


def _atom_values(sort: tuple[SortKey, ...], values: list[Any]) -> dict[str, Any]:
    """A cursor's values (one per sort key, then the id) as the values of the sort's atoms
    (``listing.sql._atoms``: a rank count sorts as two, whether it is missing and its value;
    a step time as three, whether it is missing, its value and the creation time), bound as
    ``a_`` and the atom's label."""
    out: dict[str, Any] = {}
    for index, (key, value) in enumerate(zip(sort, values, strict=False)):
        label = f"a_k{index}"
        if key.field == "rankCount":
            out[label + "n"], out[label] = (1, 0) if value is None else (0, value)
        elif key.field == "step_time":
            step, created = value
            out[label + "n"], out[label] = (1, 0.0) if step is None else (0, step)
            out[label + "c"] = created
        else:
            out[label] = value
    out["a_kid"] = values[-1]
    return out
