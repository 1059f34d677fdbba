"""Libraries: the content-addressed content that backs tracesets (the reference's libraries).

A library is the set of blobs of one traceset's content, named by that content's hash (the
traceset ``hash``: SHA-256 over its sorted name, role, size and file-hash lines). Identical
uploads complete into tracesets with one hash, whose files are the same stored blobs, so
they share one library. A library is not a row of its own: it is read off the live
(not deleted) tracesets that hold it, so its reference count stays true through delete,
purge (a purged traceset was deleted first) and promotion (which changes a traceset's scope
and metadata, never its content) without any bookkeeping to drift.

Visibility is that of the tracesets: a caller sees a library when it may see one of the
tracesets that hold it, and its ``reference_count``, ``scope`` and ``tracesets`` count only
those. Nobody learns of content only others hold, nor how many others hold it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Select, and_, false, or_, select

from tracestore import schemas
from tracestore.errors import MultipleChoices, NotFound, ValidationError, quoted
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.listing.pages import BAD_CURSOR, cursor_payload, encode_cursor
from tracestore.server.listing.query import (
    SCOPES,
    ListQuery,
    SortKey,
    parse_list_query,
    parse_sort,
)
from tracestore.server.services import Services
from tracestore.server.storage.blobs import ContentStore
from tracestore.server.tracesets import files_of

PREFIX = "lib_"
ID_HEX = 32  # a library id holds the first 128 bits of its content hash
SHORT_HEX = 12
MIN_PREFIX = 8
SORT_FIELDS = ("created", "total_size", "reference_count")
# Named, not derived from the traceset list's: a filter added there is not one here.
KNOWN_PARAMETERS = tuple(
    ["workspaceId", "scope", "search", "sort", "limit", "next", "createdAfter", "createdBefore"]
)
_SCOPE_RANK: dict[str, int] = {scope: rank for rank, scope in enumerate(SCOPES)}
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class LibraryQuery:
    """The filters (those a traceset list takes too, parsed the same way) and the sort."""

    filters: ListQuery = field(default_factory=ListQuery)
    sort: tuple[SortKey, ...] = (SortKey("created", True),)


def parse_library_query(params: Iterable[tuple[str, str]]) -> LibraryQuery:
    """The query of ``GET /api/v1/libraries``; ValidationError names any bad parameter."""
    given = list(params)
    for name, _ in given:
        if name not in KNOWN_PARAMETERS:
            raise ValidationError(
                f"Unknown query parameter {quoted(name)}; known: {', '.join(KNOWN_PARAMETERS)}"
            )
    sorts = [text for name, text in given if name == "sort"]
    if len(sorts) > 1:
        raise ValidationError("Query parameter 'sort' is given more than once")
    filters = parse_list_query((name, text) for name, text in given if name != "sort")
    if sorts:
        return LibraryQuery(filters, parse_sort(sorts[0], SORT_FIELDS))
    return LibraryQuery(filters)


@dataclass
class _Gathered:
    """One library as the caller sees it, gathered from its visible tracesets."""

    hash: str
    total_size: int
    created: datetime
    scope: str
    tracesets: list[db.Traceset] = field(default_factory=list)

    @property
    def id(self) -> str:
        return PREFIX + self.hex[:ID_HEX]

    @property
    def hex(self) -> str:
        return self.hash.removeprefix("sha256:")

    def sort_value(self, *, name: str) -> Any:
        if name == "created":
            return self.created.isoformat()
        return self.total_size if name == "total_size" else len(self.tracesets)


def _visible(principal: Principal) -> Any:
    conditions = [
        db.Traceset.scope == "public",
        and_(db.Traceset.scope == "tenant", db.Traceset.tenant_id == principal.tenant_id),
    ]
    if principal.workspace_ids:
        conditions.append(db.Traceset.workspace_id.in_(sorted(principal.workspace_ids)))
    return or_(*conditions) if conditions else false()


def _holders(principal: Principal) -> Select[Any]:
    """The live, complete tracesets the caller may see (only they have a content hash)."""
    return select(db.Traceset).where(
        db.Traceset.status != "deleted", db.Traceset.hash.is_not(None), _visible(principal)
    )


def _gather(rows: Iterable[db.Traceset]) -> dict[str, _Gathered]:
    libraries: dict[str, _Gathered] = {}
    for row in rows:
        assert row.hash is not None
        found = libraries.get(row.hash)
        if found is None:
            found = libraries[row.hash] = _Gathered(
                row.hash, row.total_size, row.created_at, row.scope
            )
        found.tracesets.append(row)
        found.created = min(found.created, row.created_at)
        if _SCOPE_RANK[row.scope] > _SCOPE_RANK[found.scope]:
            found.scope = row.scope
    for library in libraries.values():
        library.tracesets.sort(key=lambda t: (t.created_at, t.id))
    return libraries


def _storage_url(store: ContentStore, session: Any, holder: db.Traceset) -> str:
    """The store's root, as a host that reads the store directly addresses it."""
    sha256 = next((f.sha256 for f in files_of(session, holder.id) if f.sha256), None)
    if sha256 is None:  # a traceset of empty content: no blob to say where the store is
        return ""
    uri, key = store.blob_uri(sha256), store.blob_key(sha256)
    return uri[: -len(key)] if uri.endswith(key) else uri


def _item(library: _Gathered, storage_url: str) -> dict[str, Any]:
    return {
        "id": library.id,
        "hash_short": library.hex[:SHORT_HEX],
        "storage_url": storage_url,
        "scope": library.scope,
        "total_size": library.total_size,
        "reference_count": len(library.tracesets),
        "created": library.created,
    }


def _matches(library: _Gathered, search: str) -> bool:
    lowered = search.lower()
    if _HEX.fullmatch(lowered) and library.hex.startswith(lowered):
        return True
    return any(
        lowered in t.name.lower()
        or any(lowered == str(v).lower() for v in _descriptive(t.workload_metadata))
        for t in library.tracesets
    )


def _descriptive(metadata: Any) -> list[Any]:
    if not isinstance(metadata, dict):
        return []
    return [metadata.get(k) for k in ("workload_family", "workload_name") if metadata.get(k)]


def _binding(principal: Principal, query: LibraryQuery) -> str:
    bound = {**query.filters.binding(), "sort": [key.text() for key in query.sort]}
    return json.dumps(["libraries", principal.user_id, bound], sort_keys=True)


def list_libraries(
    services: Services, principal: Principal, query: LibraryQuery
) -> schemas.LibraryPage:
    """One page of the libraries the caller may see that match the query."""
    if query.filters.workspace_id is not None:
        principal.require_member(query.filters.workspace_id)
    with services.db.session(write=False) as session:
        libraries = list(_gather(session.scalars(_holders(principal))).values())
        if query.filters.workspace_id is not None:
            libraries = [
                lib
                for lib in libraries
                if any(t.workspace_id == query.filters.workspace_id for t in lib.tracesets)
            ]
        if query.filters.scope is not None:
            libraries = [lib for lib in libraries if lib.scope == query.filters.scope]
        if query.filters.search:
            libraries = [lib for lib in libraries if _matches(lib, query.filters.search)]
        if query.filters.created_after is not None:
            libraries = [lib for lib in libraries if lib.created >= query.filters.created_after]
        if query.filters.created_before is not None:
            libraries = [lib for lib in libraries if lib.created < query.filters.created_before]
        # Stable sorts, the last key first; ties broken by id in the last key's direction.
        libraries.sort(key=lambda lib: lib.id, reverse=query.sort[-1].descending)
        for sort_key in reversed(query.sort):
            libraries.sort(
                key=partial(_Gathered.sort_value, name=sort_key.field), reverse=sort_key.descending
            )
        start = _start(services, principal, query, [lib.id for lib in libraries])
        page = libraries[start : start + query.filters.limit]
        has_more = start + query.filters.limit < len(libraries)
        items = [
            schemas.LibraryItem.model_validate(
                _item(lib, _storage_url(services.store, session, lib.tracesets[0]))
            )
            for lib in page
        ]
    key = services.signer.key
    next_cursor = (
        encode_cursor(key, _binding(principal, query), [page[-1].id]) if has_more else None
    )
    return schemas.LibraryPage(
        items=items,
        pagination=schemas.Pagination(count=len(items), has_more=has_more, next_cursor=next_cursor),
    )


def _start(services: Services, principal: Principal, query: LibraryQuery, ids: list[str]) -> int:
    """Where the page starts: after the library the cursor names (the list is computed
    whole each time, so the id places it even when libraries came or went meanwhile)."""
    if query.filters.cursor is None:
        return 0
    key = services.signer.key
    values = cursor_payload(key, query.filters.cursor, _binding(principal, query))
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        raise ValidationError(BAD_CURSOR)
    return ids.index(values[0]) + 1 if values[0] in ids else 0


def get_library(services: Services, principal: Principal, reference: str) -> schemas.Library:
    """The library ``reference`` names: a ``lib_`` id, or a hex content-hash prefix of at
    least 8 characters. NotFound, ValidationError (too short) or MultipleChoices."""
    wanted = reference.lower()
    if wanted.startswith(PREFIX):
        hex_part, exact = wanted.removeprefix(PREFIX), True
    elif _HEX.fullmatch(wanted):
        if len(wanted) < MIN_PREFIX:
            raise ValidationError(
                f"Hash prefix {reference!r} is too short. Minimum {MIN_PREFIX} characters required."
            )
        hex_part, exact = wanted, False
    else:
        raise NotFound(f"Library {quoted(reference)} not found")
    if not _HEX.fullmatch(hex_part) or (exact and len(hex_part) != ID_HEX):
        raise NotFound(f"Library {quoted(reference)} not found")
    with services.db.session(write=False) as session:
        holders = session.scalars(
            _holders(principal).where(db.Traceset.hash.startswith(f"sha256:{hex_part}"))
        )
        found = list(_gather(holders).values())
        if not found:
            raise NotFound(f"Library {quoted(reference)} not found")
        if len(found) > 1:
            names = ", ".join(sorted(lib.id for lib in found))
            raise MultipleChoices(
                f"Hash prefix {reference!r} matches {len(found)} libraries: {names}; "
                "give more characters or a library id"
            )
        (library,) = found
        files = files_of(session, library.tracesets[0].id)
        storage_url = _storage_url(services.store, session, library.tracesets[0])
    return schemas.Library.model_validate(
        {
            **_item(library, storage_url),
            "hash": library.hash,
            "files": [
                {"name": f.name, "size": f.size, "hash": f"sha256:{f.sha256}"}
                for f in files
                if f.sha256
            ],
            "tracesets": [
                {"id": t.id, "name": t.name, "workspace_id": t.workspace_id}
                for t in library.tracesets
            ],
        }
    )
