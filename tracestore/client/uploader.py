"""Sending an upload session's parts in parallel and completing it (used by ``Client``).

The ``Uploader`` is handed what it needs (the http client, the retry policy and the two
session calls), never the ``Client``, so this module does not import the client back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

import httpx

from tracestore import schemas
from tracestore.client.local_files import LocalFile, sha256_of
from tracestore.client.parts import PartJob, hash_held_part, put_part, read_back
from tracestore.client.retries import RetryPolicy
from tracestore.client.transfers import ProgressCallback, ProgressEvent, UploadInterrupted
from tracestore.errors import IntegrityError, TracestoreError, UploadIncomplete, ValidationError
from tracestore.filedigest import FileDigest
from tracestore.readahead import ReadAhead


class ResumeCall(Protocol):
    """``Client.resume_upload``: the session, or with ``file`` that file's next page of part
    URLs from ``from_part`` on."""

    def __call__(
        self, upload_id: str, file: str | None = None, from_part: int = 1
    ) -> schemas.UploadSessionResponse: ...


CompleteCall = Callable[[str, Mapping[str, Mapping[int, str]], Mapping[str, str]], schemas.Traceset]


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


@dataclass(frozen=True)
class Uploader:
    """Sends a session's parts through ``http`` with ``retry``; ``resume`` is
    ``Client.resume_upload`` (fresh URLs when one expires) and ``complete`` is
    ``Client.complete_upload``."""

    http: httpx.Client
    retry: RetryPolicy
    resume: ResumeCall
    complete: CompleteCall

    def send_and_complete(
        self,
        session: schemas.UploadUrlResponse,
        files: list[LocalFile],
        received: dict[str, dict[int, str]],
        concurrency: int,
        progress: ProgressCallback | None,
        read_ahead: ReadAhead | None = None,
    ) -> schemas.Traceset:
        """Send the parts still missing, ``concurrency`` at a time, hashing each file as its
        parts pass (past what ``read_ahead`` hashed of it, which is stopped here), then
        complete the upload with each file's SHA-256."""
        stop = threading.Event()
        local = {f.name: f for f in files}
        digests = {
            e.name: FileDigest(e.size, _part_size(e), read_back(local[e.name].path, stop))
            for e in session.files
        }
        if read_ahead is not None:
            read_ahead.stop()
            for file in files:
                digest = digests[file.name]
                hashed = read_ahead.prefix(file.path, file.size, file.mtime_ns, digest.part_size)
                if hashed is not None:
                    digest.adopt(*hashed)
        jobs = _part_jobs(session, local, digests, received)
        etags: dict[str, dict[int, str]] = {f.name: dict(received.get(f.name, {})) for f in files}
        total = sum(f.size for f in files)
        if progress:
            done = total - sum(job.size for job in jobs if job.held_etag is None)
            progress(ProgressEvent("upload", "", done, total))
        changed: list[LocalFile] = []
        try:
            self._send_parts(session, jobs, etags, concurrency, progress, total, stop)
            hashes = {f.name: _sha256(f, digests[f.name], etags[f.name], changed) for f in files}
            if progress:
                progress(ProgressEvent("complete", "", 0, total))
            traceset = self.complete(session.upload_id, etags, hashes)
            if progress:
                progress(ProgressEvent("complete", "", total, total))
            return traceset
        except KeyboardInterrupt:
            raise UploadInterrupted(session.upload_id, session.traceset_id) from None
        except (TracestoreError, OSError) as exc:
            cause = exc if isinstance(exc, TracestoreError) else None
            message = cause.message if cause else str(exc)
            if changed:
                message += f" ({', '.join(str(f.path) for f in changed)} changed during the upload)"
            raise UploadIncomplete(
                f"Upload {session.upload_id} did not finish: {message}",
                upload_id=session.upload_id,
                traceset_id=session.traceset_id,
                cause=cause,
            ) from exc

    def _send_parts(
        self,
        session: schemas.UploadUrlResponse,
        jobs: list[PartJob],
        etags: dict[str, dict[int, str]],
        concurrency: int,
        progress: ProgressCallback | None,
        total: int,
        stop: threading.Event,
    ) -> None:
        lock = threading.Lock()
        fresh: dict[tuple[str, int], str] = {}

        def fresh_url(job: PartJob) -> str:
            # A part past the page of URLs an answer carried, or whose URL expired: the
            # resume route answers the next page. Each URL is handed out once, so one
            # that expires again asks anew.
            key = (job.file.name, job.part_number)
            with lock:
                if key not in fresh:
                    page = self.resume(session.upload_id, job.file.name, job.part_number)
                    for entry in page.files:
                        for part in entry.parts:
                            fresh[(entry.name, part.part_number)] = part.url
                url = fresh.pop(key, None)
            if url is None:
                raise IntegrityError(f"Part {job.part_number} of {job.file.name} has no URL")
            return url

        def send(job: PartJob) -> None:
            if job.held_etag is not None:
                hash_held_part(job, stop)
                return
            etag = put_part(
                self.http,
                job,
                retry=self.retry,
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


def _sha256(
    file: LocalFile, digest: FileDigest, etags: Mapping[int, str], changed: list[LocalFile]
) -> str:
    """The SHA-256 to declare for ``file`` at completion."""
    if file.changed():
        # The parts sent may mix old and new bytes, each hashed as it went: declare the
        # file as it is now, so the service refuses a mix rather than storing it.
        changed.append(file)
        return sha256_of(file.path)
    # None when a read-back failed and broke the chain: hash the file once more.
    return digest.hexdigest(etags) or sha256_of(file.path)


def _part_jobs(
    session: schemas.UploadUrlResponse,
    local: Mapping[str, LocalFile],
    digests: Mapping[str, FileDigest],
    received: Mapping[str, Mapping[int, str]],
) -> list[PartJob]:
    """Every part of every file, part-major (part 1 of each file, then part 2, ...): the
    workers then move different files at once, and a part is normally its file's next to
    hash when it goes, so nothing is read twice. Parts the service holds are only hashed."""
    jobs: list[tuple[int, int, PartJob]] = []
    for index, entry in enumerate(session.files):
        file, digest = local[entry.name], digests[entry.name]
        urls = {p.part_number: p.url for p in entry.parts}
        held = received.get(entry.name, {})
        for number in range(1, digest.part_count + 1):
            # A part without a URL (past the answer's page) gets one when its turn comes.
            job = PartJob(
                file,
                digest,
                number,
                (number - 1) * digest.part_size,
                digest.part_length(number),
                urls.get(number, ""),
                None if number in urls else held.get(number),
            )
            jobs.append((number, index, job))
    jobs.sort(key=lambda item: item[:2])
    return [job for _, _, job in jobs]


def _part_size(entry: schemas.FileUploadUrls) -> int:
    """The file's part size: every part but the last has it (the session may raise it for
    huge files, so it is read from the parts, not from the session's default)."""
    sizes = [p.size for p in entry.parts] + [p.size for p in entry.received_parts]
    return max(sizes, default=0) or 1
