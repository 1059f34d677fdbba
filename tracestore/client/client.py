"""The Python client: ``Client``, one typed method per route of the tracestore API (those of
``api.ApiClient``) and what takes several of them: every page of a listing, a whole upload,
a whole download.

    from tracestore import Client

    with Client("http://127.0.0.1:8000", token) as ts:
        traceset = ts.upload_traceset(["./traces"], workload_metadata={"shape": {"rankCount": 8}})
        ts.download_traceset(traceset.id, "./copy")

It imports no server dependency. Errors are the classes of ``tracestore.errors``, chosen by
the envelope's code, each carrying ``status``, ``code``, ``message`` and ``request_id``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tracestore import metadata, schemas
from tracestore.client.api import ApiClient
from tracestore.client.downloader import Downloader
from tracestore.client.local_files import check_names, collect_files
from tracestore.client.transfers import ProgressCallback
from tracestore.client.uploader import Uploader, received_parts
from tracestore.errors import ValidationError
from tracestore.ranks import parse_ranks, select_files
from tracestore.readahead import ReadAhead

__all__ = ["Client", "MetadataWarning"]


class MetadataWarning(UserWarning):
    """The service accepted an upload's workloadMetadata but warns of a member in it that
    will not work as meant (a near miss of a member the rules read, or one that promotion
    will refuse): ``upload_traceset`` issues one per warning of upload-url's answer."""


class Client(ApiClient):
    """A tracestore service at ``base_url``, used with the API token ``token``.

    ``http`` may be any ``httpx.Client`` (Starlette's TestClient included); part and
    download URLs go through it too, without the bearer token.
    """

    def _uploader(self) -> Uploader:
        # Built per upload: ``http`` and ``retry`` are the client's as they are now.
        return Uploader(self.http, self.retry, self.resume_upload, self.complete_upload)

    def _downloader(self) -> Downloader:
        return Downloader(self.http, self.retry, self.download_url)

    # --- listing ---

    def list_tracesets(
        self, *, max_items: int | None = None, **filters: Any
    ) -> Iterator[schemas.TracesetListItem]:
        """Every traceset matching ``filters``, following ``pagination.nextCursor``.

        Filters: ``workspace_id``, ``status``, ``scope``, ``census`` (the rank census's
        verdict: ``pass``, ``fail``, ``unknown``), ``search``, ``sort``
        (``"name:asc,created:desc"``; ``"step_time:desc"``: the analysis's median step
        time), ``created_after``, ``created_before``, ``min_rank_count``,
        ``max_rank_count``, ``min_world_size``, ``max_world_size``, the analysis summary's
        ``min_idle_pct``, ``max_idle_pct`` and ``min_overlap_pct`` (percentages),
        ``page_size`` (1–100), workload equality filters as snake_case keywords
        (``workload_family="llama"``) or, for dotted paths,
        ``workload={"shape.global_batch_size": 1024}``, and inspected facts as
        ``inspected={"gpu_model": "H100", "world_size": 8}``, ``uploaded_by`` (a user's
        id, ``created_by.id`` of a traceset, or ``"me"``) and ``tags`` (tracesets holding
        every one of them).
        """
        cursor: str | None = None
        seen = 0
        while True:
            page = self.list_page(cursor=cursor, **filters)
            for item in page.items:
                if max_items is not None and seen >= max_items:
                    return
                seen += 1
                yield item
            cursor = page.pagination.next_cursor
            if not page.pagination.has_more or not cursor:
                return

    # --- downloads ---

    def download_file(
        self,
        traceset_id: str,
        name: str,
        destination: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
        traceset: schemas.Traceset | None = None,
    ) -> Path:
        """Download one file to ``destination`` (a file path), verifying its size and
        SHA-256; an interrupted download leaves ``<destination>.partial``, resumed next time."""
        traceset = traceset or self.get_traceset(traceset_id)
        entry = next((f for f in traceset.files if f.name == name), None)
        if entry is None:
            raise ValidationError(f"Traceset {traceset_id} has no file named {name!r}")
        return self._downloader().fetch(traceset_id, entry, Path(destination), progress, entry.size)

    def download_traceset(
        self,
        traceset_id: str,
        directory: str | os.PathLike[str],
        *,
        files: Sequence[str] | None = None,
        concurrency: int = 4,
        progress: ProgressCallback | None = None,
        ranks: str | None = None,
        supporting: bool = False,
        traceset: schemas.Traceset | None = None,
    ) -> list[Path]:
        """Download every file (or those named in ``files``, or the files holding ``ranks``
        such as ``"0-7,12"``, with the supporting files when ``supporting``) under
        ``directory``, keeping the traceset's relative names; each is verified against its
        recorded SHA-256. An unknown rank is a ValidationError naming it. A file holding
        ranks not asked for (an archive of every rank) comes whole (``ranks.sent_whole``
        names them). ``traceset``, when the caller has it, spares asking for it again."""
        traceset = traceset or self.get_traceset(traceset_id)
        if ranks is not None:
            files = select_files(
                (
                    (
                        f.name,
                        f.role,
                        *((f.rank_range.start, f.rank_range.end) if f.rank_range else (None, None)),
                    )
                    for f in traceset.files
                ),
                parse_ranks(ranks),
                traceset_id,
                supporting,
            )
        wanted = [f for f in traceset.files if files is None or f.name in files]
        missing = set(files or ()) - {f.name for f in wanted}
        if missing:
            raise ValidationError(
                f"Traceset {traceset_id} has no file named {sorted(missing)[0]!r}"
            )
        return self._downloader().fetch_all(
            traceset_id, wanted, Path(directory), concurrency, progress
        )

    # --- uploads ---

    def upload_traceset(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        name: str | None = None,
        workload_metadata: Any = None,
        role: schemas.Role = "primary",
        supporting: Sequence[str | os.PathLike[str]] = (),
        workspace_id: str | None = None,
        tags: Sequence[str] = (),
        ttl_days: int | None = None,
        description: str | None = None,
        concurrency: int = 8,
        progress: ProgressCallback | None = None,
        resume_upload_id: str | None = None,
        on_started: Callable[[schemas.UploadUrlResponse], None] | None = None,
        read_ahead: ReadAhead | None = None,
    ) -> schemas.Traceset:
        """Upload files and directories as one traceset and return it, ``ready``.

        Directories are walked; their files are named relative to the directory. Files in
        ``paths`` get ``role``, those in ``supporting`` the role ``supporting``. The metadata
        is checked locally first (the service's own rules). Parts go out ``concurrency`` at a
        time, retried on network errors and 5xx; each file is hashed as its parts are sent
        and its SHA-256 goes with the completion, so the service verifies every byte it
        stored. ``resume_upload_id`` finishes an earlier, interrupted upload of the same
        files (or, if it completed after all, returns its traceset). ``on_started`` is called
        with the session once it exists (its ``upload_id`` is what resumes it).
        ``read_ahead``, started on the same paths while this process did other things
        (``tracestore.readahead``), spares hashing the parts it already hashed. Raises
        ``UploadIncomplete`` (with the upload id) if it cannot finish, and
        ``UploadInterrupted`` on Ctrl-C. What the service warns of in the metadata it
        accepted (a string where promotion reads a number) is a ``MetadataWarning``.
        """
        try:
            given = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
            files = collect_files(given, role) + collect_files(supporting, "supporting")
            if not files:
                raise ValidationError("Nothing to upload: no files found in the paths given")
            check_names(files)
            if resume_upload_id is not None:
                session = self.resume_upload(resume_upload_id)
                received = received_parts(session, files)  # checks they are the session's files
                if session.state == "completed":
                    # Completed by an earlier run whose answer was lost: the traceset is ready.
                    return self.get_traceset(session.traceset_id)
                if on_started:
                    on_started(session)
                return self._uploader().send_and_complete(
                    session, files, received, concurrency, progress, read_ahead
                )
            metadata.check_upload_metadata(
                workload_metadata, has_primary_files=any(f.role == "primary" for f in files)
            )
            request = schemas.TracesetUploadUrlRequest(
                name=name or Path(given[0]).resolve().name or "traceset",
                description=description,
                tags=list(tags),
                workspace_id=workspace_id,
                ttl_days=ttl_days,
                files=[
                    schemas.UploadFileSpec(name=f.name, size=f.size, role=f.role) for f in files
                ],
                workload_metadata=workload_metadata,
            )
            started = self.start_upload(request)
            for warning in started.warnings:
                warnings.warn(warning, MetadataWarning, stacklevel=2)
            if on_started:
                on_started(started)
            return self._uploader().send_and_complete(
                started, files, {}, concurrency, progress, read_ahead
            )
        finally:
            if read_ahead is not None:  # however it ended, it has nothing more to read
                read_ahead.stop()
