"""Use cases on tracesets that exist: get (the API's answer, written from its rows), edit
(name, description, tags: PATCH, an extension), delete."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Text, bindparam, cast, delete, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from tracestore import jsontext, schemas
from tracestore.errors import Conflict, Forbidden, NotFound, ValidationError
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.inspection import census_answer, census_columns
from tracestore.server.request_bodies import parse_json_body
from tracestore.server.services import Services


def manifest_hash(files: Sequence[db.TracesetFile]) -> str:
    """SHA-256 over the sorted ``name, role, size, file hash`` lines: equal content, equal hash."""
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda f: f.name):
        digest.update(f"{file.name}\t{file.role}\t{file.size}\tsha256:{file.sha256}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def find_visible(session: Session, principal: Principal, traceset_id: str) -> db.Traceset:
    """The traceset, or NotFound when it does not exist or the caller may not see it."""
    traceset = session.get(db.Traceset, traceset_id)
    if traceset is None or not principal.can_see(traceset):
        raise _not_found(traceset_id)
    return traceset


def _not_found(traceset_id: str) -> NotFound:
    return NotFound(f"Traceset '{traceset_id}' not found")


def find_writable(session: Session, principal: Principal, traceset_id: str) -> db.Traceset:
    """Like ``find_visible``, and the caller must be a member of the traceset's workspace.
    A traceset the caller may see but not change answers 404 too, so nothing leaks."""
    traceset = find_visible(session, principal, traceset_id)
    if not principal.can_write(traceset):
        raise _not_found(traceset_id)
    return traceset


def tag_rows(traceset_id: str, tags: Sequence[str]) -> list[dict[str, str]]:
    """The ``traceset_tags`` rows of a traceset holding ``tags`` (each tag once)."""
    return [{"tag": tag, "traceset_id": traceset_id} for tag in dict.fromkeys(tags)]


def store_tags(session: Session, traceset: db.Traceset, tags: Sequence[str]) -> None:
    """Keep ``tags`` as the traceset's tags: its ``tags`` (as given) and its searchable
    ``traceset_tags`` rows."""
    traceset.tags = list(tags)
    session.execute(delete(db.TracesetTag).where(db.TracesetTag.traceset_id == traceset.id))
    rows = tag_rows(traceset.id, tags)
    if rows:
        session.execute(db.TracesetTag.__table__.insert(), rows)  # type: ignore[attr-defined]


EDITABLE = ("name", "description", "tags", "add_tags", "remove_tags")
NOTHING_TO_CHANGE = (
    "Nothing to change: give at least one of name, description, tags, addTags and removeTags"
)
NOT_YOURS = (
    "Only the traceset's uploader or an admin of its tenant may edit it; ask {name} "
    "(its uploader) or a tenant admin"
)


def parse_edit_request(body: bytes) -> schemas.EditRequest:
    """The PATCH body, checked as upload checks the same members; ValidationError (400)
    names what is wrong, including a body that changes nothing."""
    if not body.strip():
        raise ValidationError(NOTHING_TO_CHANGE)
    request = parse_json_body(body, schemas.EditRequest)
    given = request.model_fields_set & set(EDITABLE)
    if not given:
        raise ValidationError(NOTHING_TO_CHANGE)
    if "tags" in given and given & {"add_tags", "remove_tags"}:
        raise ValidationError("Give tags (the whole list) or addTags/removeTags, not both")
    both = set(_given(request, "add_tags")) & set(_given(request, "remove_tags"))
    if both:
        raise ValidationError(f"Tag {sorted(both)[0]!r} is both in addTags and in removeTags")
    return request


def _given(request: schemas.EditRequest, member: str) -> list[str]:
    """The tags of ``member`` (addTags, removeTags) of the body; none when absent."""
    return list(getattr(request, member) or ())


def edited_tags(current: Sequence[str], request: schemas.EditRequest) -> list[str] | None:
    """The tags after the edit (each once, in the order given), or None when it leaves
    them alone; ValidationError when there would be more than upload allows."""
    given = request.model_fields_set
    if "tags" in given:
        tags = list(dict.fromkeys(request.tags or ()))
    elif given & {"add_tags", "remove_tags"}:
        removed = set(_given(request, "remove_tags"))
        kept = [tag for tag in current if tag not in removed]
        tags = list(dict.fromkeys([*kept, *_given(request, "add_tags")]))
    else:
        return None
    if len(tags) > schemas.MAX_TAGS:
        raise ValidationError(
            f"A traceset holds at most {schemas.MAX_TAGS} tags; this edit leaves {len(tags)}"
        )
    return tags


def edit_traceset(services: Services, principal: Principal, traceset_id: str, body: bytes) -> str:
    """Change the traceset's name, description or tags (its uploader or a tenant admin),
    recording when and by whom; the traceset as GET answers it. 404 unless the caller may
    see it, 400 for a body it refuses, 403 when they may see it but not edit it, 409 once
    it is deleted. The body is parsed before the write transaction opens (on SQLite it holds
    the database's one writer), its refusal said after the 404."""
    refused: ValidationError | None = None
    try:
        request = parse_edit_request(body)
    except ValidationError as exc:
        refused = exc
    with services.db.session() as session:
        traceset = find_visible(session, principal, traceset_id)
        if refused is not None:
            raise refused
        # Lock the row (PostgreSQL): two edits of the tags each see the other's.
        session.refresh(traceset, with_for_update=True)
        if not principal.can_edit(traceset):
            uploader = session.get(db.User, traceset.created_by)
            raise Forbidden(NOT_YOURS.format(name=uploader.name if uploader else "its uploader"))
        if traceset.status == "deleted":
            raise Conflict(f"Traceset '{traceset.id}' is deleted; it cannot be edited")
        given = request.model_fields_set
        if request.name is not None:
            traceset.name = request.name
        if "description" in given:
            traceset.description = request.description
        tags = edited_tags(list(traceset.tags or []), request)
        if tags is not None:
            store_tags(session, traceset, tags)
        now = services.now()
        traceset.updated_at = now
        traceset.edited_at = now
        traceset.edited_by = principal.user_id
    return traceset_text(services, traceset_id, viewer=principal)


def store_metadata(traceset: db.Traceset, value: Any) -> None:
    """Keep ``value`` as the traceset's workloadMetadata (``metadata_columns``)."""
    for key, column_value in metadata_columns(value).items():
        setattr(traceset, key, column_value)


def metadata_columns(value: Any) -> dict[str, Any]:
    """The columns that keep ``value`` as a traceset's workloadMetadata: the exact text
    (what the API answers) and plain JSON (what listing filters query)."""
    return {
        "metadata_text": None if value is None else jsontext.dumps(value),
        "workload_metadata": jsontext.plain(value),
    }


def _file_answers(files: Sequence[Sequence[Any]], rank_count: int | None) -> list[dict[str, Any]]:
    """Each file (its ``_FILE_COLUMNS``, in order) as the API answers it (its camelCase
    members): a primary file's rank range (all the declared ranks when it is the only
    primary file, else what inspection found) and where inspection found them (kept in the
    file's row: the traceset's stored inspection is never parsed for it)."""
    primaries = sum(1 for f in files if f[2] == "primary")
    whole = {"start": 0, "end": rank_count - 1} if rank_count is not None else None
    answers = []
    for name, size, role, content_type, sha256, metadata_status, start, end, told in files:
        ranks: dict[str, int] | None = None
        if role == "primary":
            if primaries == 1 and whole is not None:
                ranks = whole
            elif start is not None and end is not None:
                ranks = {"start": start, "end": end}
        else:
            told = None
        answers.append(
            {
                "name": name,
                "size": size,
                "role": role,
                "contentType": content_type,
                "hash": f"sha256:{sha256}" if sha256 else None,
                "metadataStatus": metadata_status,
                "rankRange": ranks,
                "rankProvenance": told if isinstance(told, str) else None,
            }
        )
    return answers


def files_of(session: Session, traceset_id: str) -> list[db.TracesetFile]:
    """A traceset's files in upload order."""
    return list(
        session.scalars(
            select(db.TracesetFile)
            .where(db.TracesetFile.traceset_id == traceset_id)
            .order_by(db.TracesetFile.position)
        )
    )


# The GET's two queries: Core selects of only the columns the view reads (an ORM load of
# every column parsed a JSON document per file that nobody is shown). Their rows are read
# by position: a Row's attribute lookup misses its class first (~0.5 us each, ~80 a GET).
_TRACESET_COLUMNS = (
    *("id", "tenant_id", "workspace_id", "scope", "name", "description", "tags"),
    *("status", "created_at", "updated_at", "expires_at", "ttl_days", "rank_count"),
    *("total_size", "file_count", "hash", "metadata_text"),
    *("created_by", "edited_at", "edited_by"),
)
_TIMESTAMPS = ("created_at", "updated_at", "expires_at", "edited_at")


def user_name(user_id: Any) -> Any:
    """The name of the user ``user_id`` (a column) names, as a scalar subquery."""
    return select(db.User.name).where(db.User.id == user_id).scalar_subquery()


def user_ref(user_id: str | None, name: str | None) -> dict[str, str] | None:
    """A user as answers show them (``schemas.UserRef``): a user id without a user row (none
    is ever deleted) is shown by its id."""
    if user_id is None:
        return None
    return {"id": user_id, "name": user_id if name is None else name}


@functools.lru_cache(maxsize=4)
def _view_columns(dialect: str) -> Select[Any]:
    """The GET's traceset row; on SQLite its timestamps as stored text (``db.timestamp_text``
    slices it: parsing and formatting three cost ~6 us a GET)."""
    return select(
        *(
            db.stored_timestamp(getattr(db.Traceset, name), dialect)
            if name in _TIMESTAMPS
            else getattr(db.Traceset, name)
            for name in _TRACESET_COLUMNS
        ),
        user_name(db.Traceset.created_by).label("created_by_name"),
        user_name(db.Traceset.edited_by).label("edited_by_name"),
        *census_columns(db.Traceset.id, dialect),
        cast(db.Traceset.inspection, Text).label("inspection_text"),  # as stored, unparsed
    ).where(db.Traceset.id == bindparam("traceset_id"))


_FILE_COLUMNS = (
    *("name", "size", "role", "content_type", "sha256", "metadata_status"),
    *("rank_start", "rank_end", "rank_provenance"),
)
_VIEW_FILES = (
    select(*(getattr(db.TracesetFile, name) for name in _FILE_COLUMNS))
    .where(db.TracesetFile.traceset_id == bindparam("traceset_id"))
    .order_by(db.TracesetFile.position)
)


def get_traceset(services: Services, principal: Principal, traceset_id: str) -> str:
    """The traceset as the API answers it, as JSON text (``answer_text``); NotFound unless
    the caller may see it."""
    return traceset_text(services, traceset_id, principal)


def traceset_text(
    services: Services,
    traceset_id: str,
    principal: Principal | None = None,
    *,
    viewer: Principal | None = None,
) -> str:
    """The GET's answer: two Core queries and ``answer_text``, no ORM load of every file;
    NotFound unless the traceset exists and ``principal``, when given, may see it (without
    one, the caller checked already: a completion's answer). ``canEdit`` is whether
    ``principal`` (or ``viewer``, who checked already) may edit it."""
    with services.db.read_connection() as reads:
        key = {"traceset_id": traceset_id}
        traceset = reads.first(_view_columns(services.db.dialect), key)
        if traceset is None or (principal is not None and not principal.may_see(*traceset[1:4])):
            raise _not_found(traceset_id)
        files = reads.all(_VIEW_FILES, key)
    caller = principal or viewer
    can_edit = caller is not None and caller.may_edit(traceset[1], traceset[17])
    return answer_text(traceset, files, can_edit=can_edit)


def answer_text(
    traceset: Sequence[Any], files: Sequence[Sequence[Any]], *, can_edit: bool = False
) -> str:
    """The API's traceset of the GET's rows (``_view_columns``, ``_VIEW_FILES``), written
    straight from them: the models' construction cost more than the queries. The
    inspection is spliced in as its stored JSON text, never parsed, as is the
    workloadMetadata. tests/test_request_path.py holds it equal to what the models
    (``schemas.Traceset``) write of the same traceset, its oracle."""
    (id_, _tenant_id, workspace_id, scope, name, description, tags, status) = traceset[:8]
    (created_at, updated_at, expires_at, ttl_days, rank_count) = traceset[8:13]
    (total_size, file_count, hash_, metadata_text) = traceset[13:17]
    (created_by, edited_at, edited_by, created_by_name, edited_by_name) = traceset[17:22]
    (verdict, missing, text) = traceset[22:]
    answer = {
        "id": id_,
        "name": name,
        "description": description,
        "tags": list(tags or []),
        "status": status,
        "scope": scope,
        "workspaceId": workspace_id,
        "createdBy": user_ref(created_by, created_by_name),
        "createdAt": db.timestamp_text(created_at),
        "updatedAt": db.timestamp_text(updated_at),
        "editedAt": None if edited_at is None else db.timestamp_text(edited_at),
        "editedBy": user_ref(edited_by, edited_by_name),
        "canEdit": can_edit,
        "expiresAt": None if expires_at is None else db.timestamp_text(expires_at),
        "ttlDays": ttl_days,
        "rankCountDerived": rank_count,
        "totalSize": total_size,
        "fileCount": file_count,
        "hash": hash_,
        **census_answer(verdict, missing),
        "files": _file_answers(files, rank_count),
    }
    # Strings, integers, None (tags are strings, rankProvenance is kept only as one).
    written = jsontext.compact(answer)
    metadata = "null" if metadata_text is None else metadata_text
    # The members in the models' order, the metadata last (as schemas.wire_json puts it).
    return f'{written[:-1]},"inspection":{text or "null"},"workloadMetadata":{metadata}}}'


def delete_traceset(services: Services, principal: Principal, traceset_id: str) -> None:
    """Soft delete: status ``deleted``; blobs no live file uses become purgeable."""
    now = services.now()
    with services.db.session() as session:
        traceset = find_writable(session, principal, traceset_id)
        if traceset.status == "deleted":
            return
        traceset.status = "deleted"
        traceset.deleted_at = now
        traceset.updated_at = now
        session.execute(
            update(db.UploadSession)
            .where(
                db.UploadSession.traceset_id == traceset.id,
                db.UploadSession.state.in_(("open", "completing")),
            )
            .values(state="failed", lease_owner=None, lease_until=None)
        )
        session.flush()
        mark_unreferenced_blobs(session, traceset.id, now)


def mark_unreferenced_blobs(session: Session, traceset_id: str, now: Any) -> None:
    """Stamp blobs of this traceset that no live (non-deleted) traceset's file still uses."""
    hashes = set(
        session.scalars(
            select(db.TracesetFile.sha256).where(
                db.TracesetFile.traceset_id == traceset_id, db.TracesetFile.sha256.is_not(None)
            )
        )
    )
    for sha256 in hashes:
        live = session.scalar(
            select(func.count())
            .select_from(db.TracesetFile)
            .join(db.Traceset, db.Traceset.id == db.TracesetFile.traceset_id)
            .where(db.TracesetFile.sha256 == sha256, db.Traceset.status != "deleted")
        )
        if not live:
            session.execute(
                update(db.Blob)
                .where(db.Blob.sha256 == sha256, db.Blob.unreferenced_since.is_(None))
                .values(unreferenced_since=now)
            )
