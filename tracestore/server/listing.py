"""Use case: list and search tracesets (SPEC 5.6), one keyset-paginated page at a time.

The query is a UNION ALL of one ordered, limited branch per way a traceset can be visible
(``workspace`` scope in each of the caller's workspaces, ``tenant`` scope in the caller's
tenant, ``public``), so each branch walks an index in sort order and stops after one page:
the cost of a page depends on the page size and the filters' selectivity, not on the table.

Cursors are keyset positions (the last item's sort values and id), signed with the
service's key and bound to the caller, the sort and the filters that produced them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Text,
    and_,
    case,
    cast,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql import Select

from tracestore import schemas
from tracestore.errors import ValidationError
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.listing_query import ListQuery, SortKey, WorkloadFilter
from tracestore.server.services import Services

# Beyond this many workspaces one IN branch replaces a branch per workspace.
MAX_WORKSPACE_BRANCHES = 16
_CURSOR_VERSION = 1

T = db.Traceset


@dataclass(frozen=True)
class _Atom:
    """One column of the keyset order: an expression, its direction and its label."""

    label: str
    expr: ColumnElement[Any] | InstrumentedAttribute[Any]
    descending: bool


def _atoms(sort: tuple[SortKey, ...], dialect: str) -> list[_Atom]:
    atoms: list[_Atom] = []
    for index, key in enumerate(sort):
        label = f"k{index}"
        if key.field == "created":
            atoms.append(_Atom(label, T.created_at, key.descending))
        elif key.field == "name":
            # Byte order on both engines, whatever the PostgreSQL database's locale.
            name = T.name.collate("C") if dialect == "postgresql" else T.name
            atoms.append(_Atom(label, name, key.descending))
        elif key.field == "status":
            atoms.append(_Atom(label, T.status, key.descending))
        elif key.field == "size":
            atoms.append(_Atom(label, T.total_size, key.descending))
        else:  # rankCount: tracesets without a rank count come last in both directions
            missing = case((T.rank_count.is_(None), 1), else_=0)
            atoms.append(_Atom(label + "n", missing, False))
            atoms.append(_Atom(label, func.coalesce(T.rank_count, 0), key.descending))
    atoms.append(_Atom("kid", T.id, sort[-1].descending))
    return atoms


def _atom_values(sort: tuple[SortKey, ...], values: list[Any]) -> list[Any]:
    """The cursor's stored values (one per sort key, then the id) as atom values."""
    out: list[Any] = []
    for key, value in zip(sort, values, strict=False):
        if key.field == "rankCount":
            out.extend([1 if value is None else 0, 0 if value is None else value])
        else:
            out.append(value)
    out.append(values[-1])
    return out


def _after(atoms: list[_Atom], values: list[Any]) -> ColumnElement[bool]:
    """Rows strictly after ``values`` in the atoms' order (lexicographic, mixed directions)."""
    alternatives = []
    for i, atom in enumerate(atoms):
        equal = [atoms[j].expr == values[j] for j in range(i)]
        beyond = atom.expr < values[i] if atom.descending else atom.expr > values[i]
        alternatives.append(and_(*equal, beyond))
    first = atoms[0]
    # The redundant bound on the leading column lets an index range scan start at the cursor.
    lead = first.expr <= values[0] if first.descending else first.expr >= values[0]
    return and_(lead, or_(*alternatives))


# --- workload filters: JSON-typed equality on a member of the stored metadata ---


def _pg_member(path: tuple[str, ...]) -> ColumnElement[Any]:
    # Segments are [a-z][a-z0-9_]* (checked at parse), so inlining them is safe; inlined
    # keys let PostgreSQL match expression indexes and keep plans stable.
    text = "tracesets.workload_metadata" + "".join(f" -> '{seg}'" for seg in path)
    return literal_column(text)


def _sqlite_path(path: tuple[str, ...]) -> ColumnElement[Any]:
    return literal_column("'$." + ".".join(path) + "'")


def _workload_condition(item: WorkloadFilter, dialect: str) -> ColumnElement[bool]:
    value = item.value
    if dialect == "postgresql":
        encoded = json.dumps(value, ensure_ascii=False)
        return _pg_member(item.path) == cast(literal(encoded, Text), JSONB)
    path = _sqlite_path(item.path)
    kind = func.json_type(T.workload_metadata, path)
    if value is None:
        return kind == "null"
    if isinstance(value, bool):
        return kind == ("true" if value else "false")
    extracted = func.json_extract(T.workload_metadata, path)
    if isinstance(value, str):
        return and_(kind == "text", extracted == value)
    return and_(kind.in_(("integer", "real")), extracted == value)


def _containment(filters: tuple[WorkloadFilter, ...]) -> ColumnElement[bool]:
    """PostgreSQL: the filters as one ``@>`` document, which the GIN index answers."""
    document: dict[str, Any] = {}
    for item in filters:
        node = document
        for segment in item.path[:-1]:
            child = node.setdefault(segment, {})
            if not isinstance(child, dict):  # one filter names a prefix of another
                return false()
            node = child
        if item.path[-1] in node:
            return false()
        node[item.path[-1]] = item.value
    encoded = json.dumps(document, ensure_ascii=False)
    return T.workload_metadata.op("@>")(cast(literal(encoded, Text), JSONB))


def _summary_columns(dialect: str) -> list[ColumnElement[Any]]:
    if dialect == "postgresql":
        return [
            _pg_member(("workload_family",)).label("workload_family"),
            _pg_member(("workload_name",)).label("workload_name"),
        ]
    # SQLite's -> answers JSON text, which the JSON type decodes.
    return [
        T.workload_metadata.op("->", return_type=JSON)(literal_column(f"'$.{member}'")).label(
            member
        )
        for member in ("workload_family", "workload_name")
    ]


# --- visibility ---


def _branches(principal: Principal, query: ListQuery, tenant_id: str) -> list[ColumnElement[bool]]:
    """Disjoint conditions (by scope), one per ordered branch of the union."""
    branches: list[ColumnElement[bool]] = []
    if query.scope in (None, "workspace"):
        workspaces = [query.workspace_id] if query.workspace_id else sorted(principal.workspace_ids)
        if len(workspaces) > MAX_WORKSPACE_BRANCHES:
            branches.append(and_(T.workspace_id.in_(workspaces), T.scope == "workspace"))
        else:
            branches.extend(and_(T.workspace_id == ws, T.scope == "workspace") for ws in workspaces)
    if query.scope in (None, "tenant"):
        branches.append(and_(T.scope == "tenant", T.tenant_id == tenant_id))
    if query.scope in (None, "public"):
        branches.append(T.scope == "public")
    return branches


def _filters(query: ListQuery, dialect: str) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [
        T.status == query.status if query.status else T.status != "deleted"
    ]
    if query.search:
        escaped = query.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        if dialect == "postgresql":
            conditions.append(T.name.ilike(pattern, escape="\\"))
        else:  # SQLite's LIKE ignores ASCII case
            conditions.append(T.name.like(pattern, escape="\\"))
    if query.created_after is not None:
        conditions.append(T.created_at >= query.created_after)
    if query.created_before is not None:
        conditions.append(T.created_at < query.created_before)
    if query.min_rank_count is not None:
        conditions.append(T.rank_count >= query.min_rank_count)
    if query.max_rank_count is not None:
        conditions.append(T.rank_count <= query.max_rank_count)
    conditions.extend(_workload_condition(item, dialect) for item in query.workload)
    if query.workload and dialect == "postgresql":
        conditions.append(_containment(query.workload))
    return conditions


# --- cursors ---


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _binding(principal: Principal, query: ListQuery) -> str:
    canonical = json.dumps(
        {"user": principal.user_id, **query.binding()}, sort_keys=True, ensure_ascii=False
    )
    return _b64(hashlib.sha256(canonical.encode()).digest()[:16])


def _signature(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, b"tracestore-list-cursor\0" + payload.encode(), "sha256").digest())


def encode_cursor(key: bytes, binding: str, values: list[Any]) -> str:
    body = json.dumps({"v": _CURSOR_VERSION, "b": binding, "k": values}, separators=(",", ":"))
    payload = _b64(body.encode())
    return f"{payload}.{_signature(key, payload)}"


_BAD_CURSOR = (
    "Invalid cursor in 'next': it was not issued by this service or has been altered; "
    "start again without 'next'"
)


def decode_cursor(key: bytes, cursor: str, binding: str, sort: tuple[SortKey, ...]) -> list[Any]:
    """The keyset values a cursor holds; ValidationError when it is forged, altered, or
    issued for another sort, other filters or another caller."""
    payload, _, signature = cursor.partition(".")
    if not signature or not hmac.compare_digest(signature, _signature(key, payload)):
        raise ValidationError(_BAD_CURSOR)
    try:
        body = json.loads(_unb64(payload))
    except ValueError:
        raise ValidationError(_BAD_CURSOR) from None
    if not isinstance(body, dict) or body.get("v") != _CURSOR_VERSION:
        raise ValidationError(_BAD_CURSOR)
    if body.get("b") != binding:
        raise ValidationError(
            "The cursor in 'next' was issued for a different sort or different filters; "
            "repeat the query that produced it, or start again without 'next'"
        )
    values = body.get("k")
    if not isinstance(values, list) or len(values) != len(sort) + 1:
        raise ValidationError(_BAD_CURSOR)
    out: list[Any] = []
    for key_, value in zip(sort, values, strict=False):
        out.append(_cursor_value(key_.field, value))
    if not isinstance(values[-1], str):
        raise ValidationError(_BAD_CURSOR)
    out.append(values[-1])
    return out


def _cursor_value(field: str, value: Any) -> Any:
    if field == "created" and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(_BAD_CURSOR) from None
    if field in ("name", "status") and isinstance(value, str):
        return value
    if field == "size" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if field == "rankCount" and (
        value is None or (isinstance(value, int) and not isinstance(value, bool))
    ):
        return value
    raise ValidationError(_BAD_CURSOR)


def _cursor_values(sort: tuple[SortKey, ...], row: Any) -> list[Any]:
    values: list[Any] = []
    for key in sort:
        if key.field == "created":
            values.append(row.created_at.isoformat())
        elif key.field == "name":
            values.append(row.name)
        elif key.field == "status":
            values.append(row.status)
        elif key.field == "size":
            values.append(row.total_size)
        else:
            values.append(row.rank_count)
    values.append(row.id)
    return values


# --- the use case ---


def build_list_statement(
    principal: Principal, query: ListQuery, dialect: str, after: list[Any] | None
) -> Select[Any]:
    """The SELECT one page runs (exposed for the benchmark's EXPLAIN)."""
    atoms = _atoms(query.sort, dialect)
    conditions = _filters(query, dialect)
    if after is not None:
        conditions.append(_after(atoms, _atom_values(query.sort, after)))
    columns = [
        T.id,
        T.name,
        T.status,
        T.scope,
        T.workspace_id,
        T.file_count,
        T.total_size,
        T.rank_count,
        T.created_at,
        *_summary_columns(dialect),
        *(atom.expr.label(atom.label) for atom in atoms),
    ]
    order = [atom.expr.desc() if atom.descending else atom.expr.asc() for atom in atoms]
    fetch = query.limit + 1
    branches = _branches(principal, query, principal.tenant_id)
    if not branches:
        return select(*columns).where(false())
    arms = [
        select(*columns).where(branch, *conditions).order_by(*order).limit(fetch)
        for branch in branches
    ]
    if len(arms) == 1:
        return arms[0]
    first, *rest = (select(arm.subquery()) for arm in arms)
    union = first.union_all(*rest).subquery("page")
    outer = [
        union.c[atom.label].desc() if atom.descending else union.c[atom.label].asc()
        for atom in atoms
    ]
    return select(union).order_by(*outer).limit(fetch)


def list_tracesets(
    services: Services, principal: Principal, query: ListQuery
) -> schemas.TracesetPage:
    """One page of the tracesets the caller may see that match the query."""
    if query.workspace_id is not None:
        principal.require_member(query.workspace_id)
    key = services.settings.signing_key_bytes()
    binding = _binding(principal, query)
    after = None if query.cursor is None else decode_cursor(key, query.cursor, binding, query.sort)
    dialect = services.db.dialect
    statement = build_list_statement(principal, query, dialect, after)
    with services.db.session(write=False) as session:
        rows = session.execute(statement).all()
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    items = [
        schemas.TracesetListItem(
            id=row.id,
            name=row.name,
            status=row.status,
            scope=row.scope,
            workspace_id=row.workspace_id,
            file_count=row.file_count,
            total_size=row.total_size,
            rank_count_derived=row.rank_count,
            created_at=row.created_at,
            workload=schemas.WorkloadSummary(
                workload_family=row.workload_family, workload_name=row.workload_name
            ),
        )
        for row in rows
    ]
    next_cursor = (
        encode_cursor(key, binding, _cursor_values(query.sort, rows[-1]))
        if has_more and rows
        else None
    )
    return schemas.TracesetPage(
        items=items,
        pagination=schemas.Pagination(count=len(items), has_more=has_more, next_cursor=next_cursor),
    )
