"""Sending an upload session's parts in parallel and completing it (used by ``Client``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from tracestore import schemas
from tracestore.errors import IntegrityError, TracestoreError, UploadIncomplete, ValidationError
from tracestore.transfers import (
    LocalFile,
    PartJob,
    ProgressCallback,
    ProgressEvent,
    UploadInterrupted,
    put_part,
)

if TYPE_CHECKING:
    from tracestore.client import Client


def received_parts(
    session: schemas.UploadSessionResponse, files: list[LocalFile]
) -> dict[str, dict[int, str]]:
    """The ETags the store already holds per file, after checking that the local files are
    the session's files with the sizes it declared and that every received part is whole."""
    upload_id = session.upload_id
    local = {f.name: f for f in files}
    for entry in session.files:
        file = local.get(entry.name)
        if file is None:
            raise ValidationError(
                f"Upload {upload_id} holds file {entry.name!r}, which the paths given do not"
            )
        if file.size != entry.size:
            raise IntegrityError(
                f"{file.path} is {file.size} bytes; upload {upload_id} declared "
                f"{entry.size} bytes for {entry.name!r}"
            )
        part_size = _part_size(entry)
        for part in entry.received_parts:
            expected = min(part_size, entry.size - (part.part_number - 1) * part_size)
            if part.size != expected:
                raise IntegrityError(
                    f"Part {part.part_number} of {entry.name!r} in upload {upload_id} has "
                    f"{part.size} bytes; {expected} expected"
                )
    extra = sorted(set(local) - {f.name for f in session.files})
    if extra:
        raise ValidationError(f"{extra[0]!r} is not part of upload {upload_id}")
    return {e.name: {p.part_number: p.etag for p in e.received_parts} for e in session.files}


def send_and_complete(
    client: Client,
    session: schemas.UploadUrlResponse,
    files: list[LocalFile],
    received: dict[str, dict[int, str]],
    concurrency: int,
    progress: ProgressCallback | None,
) -> schemas.Traceset:
    jobs = _part_jobs(session, {f.name: f for f in files})
    etags: dict[str, dict[int, str]] = {f.name: dict(received.get(f.name, {})) for f in files}
    total = sum(f.size for f in files)
    if progress:
        done = sum(f.size for f in files) - sum(job.size for job in jobs)
        progress(ProgressEvent("upload", "", done, total))
    try:
        _send_parts(client, session, jobs, etags, concurrency, progress, total)
        if progress:
            progress(ProgressEvent("complete", "", 0, total))
        traceset = client.complete_upload(session.upload_id, etags)
        if progress:
            progress(ProgressEvent("complete", "", total, total))
        return traceset
    except KeyboardInterrupt:
        raise UploadInterrupted(session.upload_id, session.traceset_id) from None
    except (TracestoreError, OSError) as exc:
        cause = exc if isinstance(exc, TracestoreError) else None
        raise UploadIncomplete(
            f"Upload {session.upload_id} did not finish: {cause.message if cause else exc}",
            upload_id=session.upload_id,
            traceset_id=session.traceset_id,
            cause=cause,
        ) from exc


def _send_parts(
    client: Client,
    session: schemas.UploadUrlResponse,
    jobs: list[PartJob],
    etags: dict[str, dict[int, str]],
    concurrency: int,
    progress: ProgressCallback | None,
    total: int,
) -> None:
    stop = threading.Event()
    lock = threading.Lock()
    fresh: dict[tuple[str, int], str] = {}

    def fresh_url(job: PartJob) -> str:
        with lock:
            if (job.file.name, job.part_number) not in fresh:
                for entry in client.resume_upload(session.upload_id).files:
                    for part in entry.parts:
                        fresh[(entry.name, part.part_number)] = part.url
            url = fresh.get((job.file.name, job.part_number))
        if url is None:
            raise IntegrityError(f"Part {job.part_number} of {job.file.name} has no URL")
        return url

    def send(job: PartJob) -> None:
        etag = put_part(
            client.http,
            job,
            retry=client.retry,
            stop=stop,
            progress=progress,
            total=total,
            fresh_url=fresh_url,
        )
        with lock:
            etags[job.file.name][job.part_number] = etag

    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="ts-put")
    futures: list[Future[None]] = []
    try:
        futures = [pool.submit(send, job) for job in jobs]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in finished:
            error = future.exception()
            if error is not None:
                raise error
    except BaseException:
        stop.set()
        for future in futures:
            future.cancel()
        raise
    finally:
        # Workers see ``stop`` within one chunk; waiting for them keeps the session's
        # state settled (no PUT still in flight) when this returns or raises.
        pool.shutdown(wait=True, cancel_futures=True)


def _part_jobs(session: schemas.UploadUrlResponse, local: Mapping[str, LocalFile]) -> list[PartJob]:
    """The parts still to send, in file order, each with its byte range."""
    jobs: list[PartJob] = []
    for entry in session.files:
        part_size = _part_size(entry)
        for part in entry.parts:
            jobs.append(
                PartJob(
                    local[entry.name],
                    part.part_number,
                    (part.part_number - 1) * part_size,
                    part.size,
                    part.url,
                )
            )
    return jobs


def _part_size(entry: schemas.UploadFileUrls) -> int:
    """The file's part size: every part but the last has it (the session may raise it for
    huge files, so it is read from the parts, not from the session's default)."""
    sizes = [p.size for p in entry.parts] + [p.size for p in entry.received_parts]
    return max(sizes, default=0) or 1
