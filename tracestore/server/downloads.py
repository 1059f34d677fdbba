"""Use cases that hand bytes out: download URLs (one file, or the whole traceset as a ZIP),
the archive stream itself, resolve (where the bytes are) and validate (are they intact)."""

from __future__ import annotations

import io
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tracestore import schemas
from tracestore.errors import Conflict, Gone, NotFound, ValidationError, quoted
from tracestore.ranks import (
    Runs,
    parse_ranks,
    ranks_text,
    select_files,
    sent_whole,
    within,
)
from tracestore.server import db
from tracestore.server.archive import ArchiveEntry, archive_size, stream_zip
from tracestore.server.auth import Principal
from tracestore.server.inspection import stored_census_checks, stored_readiness
from tracestore.server.integrity import file_integrity
from tracestore.server.lifecycle import record_use
from tracestore.server.services import Services
from tracestore.server.storage.blobs import ContentStore
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.stragglers import stragglers_check
from tracestore.server.tracesets import files_of, find_visible

NOT_EVALUATED = "Not evaluated yet: trace inspection has not reported on this traceset"


def _ready(session: Session, principal: Principal, traceset_id: str, doing: str) -> db.Traceset:
    traceset = find_visible(session, principal, traceset_id)
    if traceset.status != "ready":
        raise Conflict(
            f"Traceset '{traceset_id}' is {traceset.status}; only a ready traceset can be {doing}"
        )
    return traceset


# --- download ---


def download_url(
    services: Services,
    principal: Principal,
    traceset_id: str,
    file_name: str | None,
    base_url: str,
    ranks: str | None = None,
    supporting: bool = False,
) -> schemas.DownloadAnswer:
    """A presigned GET for one file, or (``file_name`` None) for the ZIP of every file, or
    of the files of ``ranks`` (``0-7,12``; with the supporting files when ``supporting``)
    and their manifest; the service's own URLs on ``base_url`` (where the caller reaches
    it). Counts as a use: the traceset's TTL starts again."""
    now = services.now()
    expires_at = now + services.settings.download_url_ttl
    if ranks is not None and file_name is not None:
        raise ValidationError("Give file or ranks, not both")
    if supporting and ranks is None:
        raise ValidationError("supporting applies to a download of ranks; give ranks too")
    with services.db.session() as session:
        traceset = _ready(session, principal, traceset_id, "downloaded")
        if ranks is not None:
            runs = parse_ranks(ranks)
            chosen = rank_selection(files_of(session, traceset_id), runs, traceset_id, supporting)
            whole = sent_whole(((f.name, f.role, f.rank_start, f.rank_end) for f in chosen), runs)
            selection = _selection(runs, supporting)
            url = archive_url(
                services, traceset_id, int(expires_at.timestamp()), base_url, selection
            )
            record_use(session, traceset, now)
            return schemas.DownloadAnswer(
                url=url,
                expires_at=expires_at,
                file=None,
                ranks=ranks_text(runs),
                whole_files=[schemas.WholeFile(name=n, ranks=r) for n, r in whole],
            )
        if file_name is None:
            url = archive_url(services, traceset_id, int(expires_at.timestamp()), base_url)
        else:
            file = session.scalars(
                select(db.TracesetFile).where(
                    db.TracesetFile.traceset_id == traceset_id,
                    db.TracesetFile.name == file_name,
                )
            ).first()
            if file is None or file.sha256 is None:
                raise NotFound(f"File '{file_name}' not found in traceset '{traceset_id}'")
            url = services.store.download_url(
                file.sha256, filename=file.name, expires_at=expires_at, base_url=base_url
            )
        record_use(session, traceset, now)
    return schemas.DownloadAnswer(url=url, expires_at=expires_at, file=file_name)


def archive_url(
    services: Services, traceset_id: str, expires: int, base_url: str, selection: str = ""
) -> str:
    """The presigned URL of a traceset's ZIP (of the ranks ``selection`` names, when
    given), on the service itself (at ``base_url``) whatever the store (an object store
    cannot zip)."""
    return base_url + services.signer.archive_path(traceset_id, expires, selection)


# The manifest of a ranks archive sits under a folder of its own; a traceset file of the same
# name, in any case, moves it under another (``_tracestore_/``, ...), so it never replaces one.
MANIFEST_FOLDER = "_tracestore"
MANIFEST_NAME = "manifest.json"


def _selection(runs: Runs, supporting: bool) -> str:
    """What a ranks archive URL carries (and signs): ``0-7,12`` or ``0-7,12+supporting``."""
    return ranks_text(runs) + ("+supporting" if supporting else "")


def _parse_selection(selection: str) -> tuple[Runs, bool]:
    text, plus, _ = selection.partition("+supporting")
    return parse_ranks(text), bool(plus)


def rank_selection(
    files: Sequence[db.TracesetFile], runs: Runs, traceset_id: str, supporting: bool
) -> list[db.TracesetFile]:
    """The files a ranks download holds (``ranks.select_files``)."""
    chosen = set(
        select_files(
            ((f.name, f.role, f.rank_start, f.rank_end) for f in files),
            runs,
            traceset_id,
            supporting,
        )
    )
    return [f for f in files if f.name in chosen]


def manifest(files: Sequence[db.TracesetFile], runs: Runs) -> dict[str, Any]:
    """``manifest.json`` of a ranks archive: the ranks asked for, and per file its ranks,
    the ranks of the request it holds (``selected``: ``0-7,12``), size, SHA-256, format and
    role. Ranks as intervals: its size grows with the files, never with the ranks they
    declare or the request names (a key per rank was 128 MB for ``0-2999999``)."""
    entries = []
    for f in files:
        inspection = f.inspection if isinstance(f.inspection, dict) else {}
        ranks = selected = None
        if f.rank_start is not None:
            end = f.rank_end if f.rank_end is not None else f.rank_start
            ranks = {"start": f.rank_start, "end": f.rank_end}
            selected = ranks_text(within(runs, f.rank_start, end)) or None
        entries.append(
            {
                "name": f.name,
                "role": f.role,
                "ranks": ranks,
                "selected": selected,
                "size": f.size,
                "sha256": f.sha256,
                "format": inspection.get("format"),
            }
        )
    return {"ranks": ranks_text(runs), "files": entries}


def _folded(name: str) -> str:
    """A name as a case-insensitive, normalising file system (macOS, Windows) compares it."""
    return unicodedata.normalize("NFKC", name).casefold()


def _manifest_name(names: Iterable[str]) -> str:
    """Where the manifest goes: under a folder no file of the traceset is in, nor is named,
    compared as macOS and Windows compare names (``_TRACESTORE/manifest.json`` would
    replace ``_tracestore/manifest.json`` there)."""
    taken = {_folded(name.partition("/")[0]) for name in names}
    folder = MANIFEST_FOLDER
    while _folded(folder) in taken:
        folder += "_"
    return f"{folder}/{MANIFEST_NAME}"


@dataclass(frozen=True)
class ArchiveStream:
    filename: str
    size: int
    chunks: Iterator[bytes]


def open_archive(
    services: Services, traceset_id: str, expires: int, signature: str, selection: str = ""
) -> ArchiveStream:
    """Check an archive URL's signature and answer the traceset's ZIP (of the ranks
    ``selection`` names, with their manifest, when given) as a stream of chunks (read blob
    by blob, never held whole)."""
    services.signer.verify_archive(traceset_id, expires, signature, services.now(), selection)
    with services.db.session(write=False) as session:
        traceset = session.get(db.Traceset, traceset_id)
        if traceset is None:
            raise NotFound(f"Traceset '{traceset_id}' not found")
        if traceset.status != "ready":
            raise Conflict(
                f"Traceset '{traceset_id}' is {traceset.status}; only a ready traceset can be "
                "downloaded"
            )
        files = files_of(session, traceset_id)
        modified = traceset.created_at
        filename = _archive_name(traceset.name, traceset_id)
        extra: list[ArchiveEntry] = []
        if selection:
            runs, supporting = _parse_selection(selection)
            names = {f.name for f in files}
            files = rank_selection(files, runs, traceset_id, supporting)
            text = json.dumps(manifest(files, runs), indent=2).encode() + b"\n"
            extra.append(
                ArchiveEntry(_manifest_name(names), len(text), partial(io.BytesIO, text), modified)
            )
            filename = filename.removesuffix(".zip") + f"-ranks-{_ranks_label(runs)}.zip"
    entries = [
        ArchiveEntry(f.name, f.size, partial(services.store.open_blob, f.sha256), modified)
        for f in files
        if f.sha256 is not None
    ] + extra
    return ArchiveStream(filename, archive_size(entries), stream_zip(entries))


def local_blob(
    services: Services,
    store: LocalBlobStore,
    sha256: str,
    filename: str,
    expires: int,
    signature: str,
) -> tuple[Path, os.stat_result]:
    """Check an embedded-store blob URL's signature; the blob's file and its status. Gone
    when the bytes were purged after the URL was signed."""
    services.signer.verify_content(sha256, filename, expires, signature, services.now())
    path = store.blob_path(sha256)
    try:
        return path, path.stat()
    except FileNotFoundError:
        raise Gone(
            f"The bytes of {quoted(filename)} are no longer stored (its traceset was deleted "
            "or expired)"
        ) from None


def _ranks_label(runs: Runs) -> str:
    """The ranks in an archive's file name: the list, or its span when the list is long (a
    request may name 1,024 ranges)."""
    text = ranks_text(runs)
    return text if len(text) <= 64 else f"{runs[0][0]}-{runs[-1][1]}-{len(runs)}-ranges"


def _archive_name(name: str, traceset_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._+=@-]+", "_", name).strip("._")
    return f"{safe or traceset_id}.zip"


# --- resolve ---


def resolve_traceset(
    services: Services, principal: Principal, traceset_id: str
) -> schemas.ResolveAnswer:
    """Where the bytes of every file are, for a host that reads the store directly.
    Counts as a use: the traceset's TTL starts again."""
    store: ContentStore = services.store
    with services.db.session() as session:
        traceset = _ready(session, principal, traceset_id, "resolved")
        files = [f for f in files_of(session, traceset_id) if f.sha256 is not None]
        record_use(session, traceset, services.now())
        return schemas.ResolveAnswer(
            traceset_id=traceset.id,
            name=traceset.name,
            files=[
                schemas.ResolvedFile(
                    name=f.name,
                    role=f.role,  # type: ignore[arg-type]
                    size=f.size,
                    key=store.blob_key(f.sha256),  # type: ignore[arg-type]
                    uri=store.blob_uri(f.sha256),  # type: ignore[arg-type]
                )
                for f in files
            ],
            total_size=traceset.total_size,
        )


# --- validate ---


def validate_traceset(
    services: Services, principal: Principal, traceset_id: str
) -> schemas.ValidateAnswer:
    """Re-read every blob (at most once per ``TRACESTORE_REVERIFY_INTERVAL``: ``integrity``),
    check the metadata, and report inspection's checks."""
    with services.db.session(write=False) as session:
        traceset = _ready(session, principal, traceset_id, "validated")
        files = files_of(session, traceset_id)
        rank_count = traceset.rank_count
        recorded = stored_census_checks(traceset) or []
        ready = stored_readiness(traceset)
        stragglers = stragglers_check(session.get(db.TracesetAnalysis, traceset_id))
    integrity = file_integrity(
        services.store,
        files,
        services.verified_blobs,
        services.now(),
        services.settings.reverify_interval,
    )
    return validate_checks(
        integrity,
        files,
        rank_count,
        inspected=[schemas.ValidationCheck(**check) for check in recorded],
        readiness=[schemas.ToolReadiness(**entry) for entry in ready],
        analysed=[schemas.ValidationCheck(**stragglers)],
    )


# The checks inspection reports, in the order validate lists them.
INSPECTION_CHECKS = ("rank_census", "parallelism_consistency", "process_groups")


def validate_checks(
    integrity: schemas.ValidationCheck,
    files: Sequence[db.TracesetFile],
    rank_count: int | None,
    *,
    inspected: Sequence[schemas.ValidationCheck] = (),
    readiness: Sequence[schemas.ToolReadiness] = (),
    analysed: Sequence[schemas.ValidationCheck] = (),
) -> schemas.ValidateAnswer:
    """The validate answer, after ``integrity`` (``integrity.file_integrity``'s check).
    ``analysed`` are the analysis's checks (``stragglers``: a warning at most), listed last;
    ``inspected`` are inspection's verdicts; a check of
    ``INSPECTION_CHECKS`` it does not hold (inspection has not finished, or ran before the
    check existed) is reported as not evaluated (``passed: null``), which does not make the
    traceset invalid; neither does a warning. ``readiness`` (which tools can read the set)
    is answered apart from the checks and never makes it invalid."""
    by_name = {check.name: check for check in inspected}
    checks = [
        integrity,
        metadata_complete(files, rank_count),
        *(
            by_name.get(name)
            or schemas.ValidationCheck(name=name, passed=None, message=NOT_EVALUATED)
            for name in INSPECTION_CHECKS
        ),
        *analysed,
    ]
    return schemas.ValidateAnswer(
        valid=all(check.passed is not False for check in checks),
        checks=checks,
        readiness=list(readiness),
    )


def metadata_complete(
    files: Sequence[db.TracesetFile], rank_count: int | None
) -> schemas.ValidationCheck:
    """A traceset with primary trace files declares its rank count."""
    primaries = sum(1 for f in files if f.role == "primary")
    if primaries and rank_count is None:
        return schemas.ValidationCheck(
            name="metadata_complete",
            passed=False,
            message=f"{primaries} primary files but no rank count declared in workloadMetadata",
        )
    declared = f"rank count {rank_count}" if rank_count is not None else "no rank count needed"
    return schemas.ValidationCheck(
        name="metadata_complete", passed=True, message=f"{declared}; {primaries} primary files"
    )
