"""What every upload use case needs to know of an upload session: the part size of its
files, each file as the store stages it, the session as its caller may see it, and whether
it is past its expiry."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from tracestore.errors import Gone, NotFound
from tracestore.server import db
from tracestore.server.auth import Principal
from tracestore.server.settings import MAX_PARTS_PER_FILE, MIB
from tracestore.server.storage.blobs import StagedFile


def part_size_for(size: int, base: int) -> int:
    """The session's part size, raised (to whole MiB) so no file needs over 10,000 parts."""
    needed = -(-size // MAX_PARTS_PER_FILE)
    return max(base, -(-needed // MIB) * MIB)


def staged_file(upload: db.UploadSession, file: db.TracesetFile) -> StagedFile:
    """A file of the session as the blob store stages it."""
    return StagedFile(
        upload.id,
        file.position,
        file.size,
        part_size_for(file.size, upload.part_size),
        file.staging_handle,
    )


def visible_session(
    session: Session, principal: Principal, upload_id: str
) -> tuple[db.UploadSession, db.Traceset]:
    """The session and its traceset, or NotFound when the caller may not write to it."""
    upload = session.get(db.UploadSession, upload_id)
    traceset = session.get(db.Traceset, upload.traceset_id) if upload else None
    if upload is None or traceset is None or not principal.can_write(traceset):
        raise NotFound(f"Upload session '{upload_id}' not found")
    return upload, traceset


def check_not_expired(upload_id: str, state: str, expires_at: datetime, now: datetime) -> None:
    """Raise Gone when the session has expired (or is open past its expiry)."""
    if state == "expired" or (state in ("open", "completing") and now >= expires_at):
        raise Gone(f"Upload session '{upload_id}' has expired")
