"""Use case: list and search tracesets (docs/api.md), one keyset-paginated page at a time.

The SQL lives in ``listing.sql`` (its shape and values in ``listing.plan``), the parsing of
the query string in ``listing_query``. Cursors are keyset positions (the last item's sort
values and id), signed with the service's key and bound to the caller, the sort and the
filters that produced them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from tracestore import jsontext
from tracestore.errors import ValidationError
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.inspection import census_answer
from tracestore.server.listing import plan as query_plan
from tracestore.server.listing import rare_tags, sql
from tracestore.server.listing.query import ListQuery, SortKey, parse_list_query
from tracestore.server.services import Services
from tracestore.server.tracesets import user_ref

_CURSOR_VERSION = 1


# --- cursors ---


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(encoded: str) -> bytes:
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))


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


BAD_CURSOR = (
    "Invalid cursor in 'next': it was not issued by this service or has been altered; "
    "start again without 'next'"
)


def cursor_payload(key: bytes, cursor: str, binding: str) -> Any:
    """What ``encode_cursor`` put in a cursor, unchecked in shape; ValidationError when it is
    forged, altered, or issued for another sort, other filters or another caller."""
    payload, _, signature = cursor.partition(".")
    if not signature or not hmac.compare_digest(
        signature.encode(), _signature(key, payload).encode()
    ):
        raise ValidationError(BAD_CURSOR)
    try:
        body = json.loads(_unb64(payload))
    except ValueError:
        raise ValidationError(BAD_CURSOR) from None
    if not isinstance(body, dict) or body.get("v") != _CURSOR_VERSION:
        raise ValidationError(BAD_CURSOR)
    if body.get("b") != binding:
        raise ValidationError(
            "The cursor in 'next' was issued for a different sort or different filters; "
            "repeat the query that produced it, or start again without 'next'"
        )
    return body.get("k")


def decode_cursor(
    key: bytes, cursor: str, binding: str, sort: tuple[SortKey, ...], dialect: str
) -> list[Any]:
    """The keyset values a cursor holds (see ``cursor_payload``), as ``dialect``'s select
    compares them (``_cursor_value``)."""
    values = cursor_payload(key, cursor, binding)
    if not isinstance(values, list) or len(values) != len(sort) + 1:
        raise ValidationError(BAD_CURSOR)
    out: list[Any] = []
    for key_, value in zip(sort, values, strict=False):
        out.append(_cursor_value(key_.field, value, dialect))
    if not isinstance(values[-1], str):
        raise ValidationError(BAD_CURSOR)
    out.append(values[-1])
    return out


def _cursor_value(field: str, value: Any, dialect: str) -> Any:
    if field == "created":
        return _cursor_created(value, dialect)
    if field == "step_time" and isinstance(value, dict) and set(value) == {"t", "c"}:
        step = value["t"]
        if step is None or (isinstance(step, int | float) and not isinstance(step, bool)):
            return (step, _cursor_created(value["c"], dialect))
    if field in ("name", "status") and isinstance(value, str):
        return value
    if field == "size" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if field == "rankCount" and (
        value is None or (isinstance(value, int) and not isinstance(value, bool))
    ):
        return value
    raise ValidationError(BAD_CURSOR)


def _cursor_created(value: Any, dialect: str) -> Any:
    """A cursor's creation time as the select compares it (``listing.sql``'s ``a`` marks):
    on SQLite the text as stored, elsewhere the instant. A cursor made on SQLite carries the
    stored text itself (``{"s": text}``): a row written by other means than this service may
    hold a shape ``UTCDateTime`` never writes (``CURRENT_TIMESTAMP``'s, without a fraction),
    and the canonical text of the same instant sorts after it, so the row came after its own
    cursor again and the pages never ended. A cursor of the instant's ISO text (as all were
    before, and as PostgreSQL's are) is compared as ``UTCDateTime`` stores that instant."""
    if isinstance(value, dict) and set(value) == {"s"} and isinstance(value["s"], str):
        if dialect == "sqlite":
            return value["s"]
        value = value["s"]  # a SQLite service's cursor, its key kept across a move
    if not isinstance(value, str):
        raise ValidationError(BAD_CURSOR)
    try:
        instant = db.timestamp_value(value)
    except ValueError:
        raise ValidationError(BAD_CURSOR) from None
    return db.sqlite_timestamp_text(instant) if dialect == "sqlite" else instant


def _cursor_values(sort: tuple[SortKey, ...], row: Sequence[Any]) -> list[Any]:
    # The row is sql.statement's: id, name, status, scope, workspace_id, file_count,
    # total_size, rank_count, created_at (stored text on SQLite), the workload members, the
    # median step time, the uploader's id and name, the census verdict and missing ranks.
    values: list[Any] = []
    created = row[8]
    created_value = {"s": created} if isinstance(created, str) else created.isoformat()
    for key in sort:
        if key.field == "created":
            values.append(created_value)
        elif key.field == "step_time":
            values.append({"t": row[11], "c": created_value})
        elif key.field == "name":
            values.append(row[1])
        elif key.field == "status":
            values.append(row[2])
        elif key.field == "size":
            values.append(row[6])
        else:
            values.append(row[7])
    values.append(row[0])
    return values


# --- the use case ---


def list_page(
    services: Services, principal: Principal, parameters: Sequence[tuple[str, str]]
) -> str:
    """The page a list request's query parameters ask for, as JSON text (its route's and
    its lane's answer); parsed after the token is checked: a bad token is a 401 whatever
    the query says."""
    return page_text(services, principal, parse_list_query(parameters))


def page_text(services: Services, principal: Principal, query: ListQuery) -> str:
    """One page of the tracesets the caller may see that match the query, as the route
    answers it (``schemas.TracesetPage``): JSON text written straight from the rows, as
    building and dumping a model per item cost a quarter of the request.
    tests/test_request_path.py holds it to what the page model reads and writes."""
    if query.workspace_id is not None:
        principal.require_member(query.workspace_id)
    key = services.signer.key
    binding = _binding(principal, query)
    after = (
        None
        if query.cursor is None
        else decode_cursor(key, query.cursor, binding, query.sort, services.db.dialect)
    )
    # Core rows on a connection, no ORM session: its result machinery cost more than the
    # queries.
    with services.db.read_connection() as reads:
        rare = rare_tags.rarest(reads, query.tags, query.limit + 1, services.db.dialect)
        shape, values = query_plan.plan(principal, query, services.db.dialect, after, rare)
        if shape.dialect == "postgresql" and (shape.search or shape.workload or shape.inspected):
            # psycopg prepares a statement run often, and a generic plan cannot weigh how
            # selective this search term or metadata document is (index walk vs GIN/trigram).
            reads.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
        if shape.dialect == "postgresql" and shape.census is not None:
            # Its walk stops after a page's matches (a thousand rows when one in twenty
            # fails): parallel workers cost more to start than it (240 ms against 15 at a
            # million tracesets, bench/list.py).
            reads.execute(text("SET LOCAL max_parallel_workers_per_gather = 0"))
        rows = reads.all(sql.statement(shape), values, key=shape)
    has_more = len(rows) > query.limit
    # By position, not by name: a Row's attribute lookup misses its class first (~0.5 us
    # each, a tenth of the request at 20 items); the columns are sql.statement's.
    items = [
        {
            "id": id_,
            "name": name,
            "status": status,
            "scope": scope,
            "workspaceId": workspace_id,
            "fileCount": files,
            "totalSize": size,
            "rankCountDerived": ranks,
            "createdAt": db.timestamp_text(created),
            "createdBy": user_ref(uploader, uploader_name),
            **census_answer(verdict, missing),
            "workload": {"workload_family": family, "workload_name": workload_name},
        }
        for (
            id_,
            name,
            status,
            scope,
            workspace_id,
            files,
            size,
            ranks,
            created,
            family,
            workload_name,
            _step_time,
            uploader,
            uploader_name,
            verdict,
            missing,
        ) in rows[: query.limit]
    ]
    next_cursor = (
        encode_cursor(key, binding, _cursor_values(query.sort, rows[query.limit - 1]))
        if has_more
        else None
    )
    page = {
        "items": items,
        "pagination": {"count": len(items), "hasMore": has_more, "nextCursor": next_cursor},
    }
    # Every value is a string, an integer or None, but for the workload members, which are
    # whatever the metadata holds.
    if all(_plain(row[9]) and _plain(row[10]) for row in rows):
        return jsontext.compact(page)
    return json.dumps(page, ensure_ascii=False, separators=(",", ":"))


def _plain(value: Any) -> bool:
    return value is None or type(value) is str
