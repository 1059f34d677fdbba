"""Use case: receive the body of one part into the embedded store (S3 receives parts
itself): ``put_part``, its route's and its lane's. ``open_part`` checks everything a part
PUT can be refused for before a byte is written; ``receive_part`` writes the body as it
arrives."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import bindparam, select
from starlette.concurrency import run_in_threadpool

from tracestore.errors import Conflict, NotFound, PayloadTooLarge, TooManyRequests, ValidationError
from tracestore.server import db
from tracestore.server.presigned import PartGrant
from tracestore.server.services import Services
from tracestore.server.serving.body_protocol import ReceiveInto
from tracestore.server.storage.blobs import StagedFile
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.staging import PartWriter
from tracestore.server.upload_sessions import check_not_expired, part_size_for

_SESSION, _FILE = db.UploadSession.__table__, db.TracesetFile.__table__
# Every part PUT asks this: one narrow Core query on a bare connection (an ORM session
# cost three times as much), its parameters bound per call.
_PART_QUERY = (
    select(
        _SESSION.c.state,
        _SESSION.c.expires_at,
        _SESSION.c.part_size,
        _FILE.c.size,
        _FILE.c.staging_handle,
    )
    .join(_FILE, _FILE.c.traceset_id == _SESSION.c.traceset_id)
    .where(_SESSION.c.id == bindparam("upload"), _FILE.c.position == bindparam("position"))
)


async def put_part(
    services: Services,
    store: LocalBlobStore,
    grant: PartGrant,
    signature: str,
    content_length: str | None,
    body: AsyncIterator[bytes],
    checksum: str | None,
    into: ReceiveInto | None = None,
) -> str:
    """Receive one part (``open_part``'s check, a short read, then ``receive_part``); its
    ETag, quoted as the answer's header carries it."""
    writer = await services.db.short_read(
        open_part, services, store, grant, signature, content_length
    )
    etag = await receive_part(writer, grant, body, checksum, into=into)
    return f'"{etag}"'


class LazyPartWriter:
    """A part's ``PartWriter``, opened by the first write (or the finish of an empty part)
    on the thread that does it: the body's own (serving/body_protocol.py), not the event loop's.
    Opening makes the staged file's directories and takes the part's claim, file system
    work that cost the loop milliseconds a part on a VM's ext4, serialising an upload of
    many small files there."""

    def __init__(self, open_writer: Callable[[], PartWriter]) -> None:
        self._open = open_writer
        self._writer: PartWriter | None = None

    def _opened(self) -> PartWriter:
        if self._writer is None:
            self._writer = self._open()
        return self._writer

    def write(self, chunks: Sequence[bytes | memoryview], *, checksum: bool) -> None:
        self._opened().write(chunks, checksum=checksum)

    def finish(self, checksum_b64: str | None) -> str:
        return self._opened().finish(checksum_b64)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()


def open_part(
    services: Services,
    store: LocalBlobStore,
    grant: PartGrant,
    signature: str,
    content_length: str | None,
) -> LazyPartWriter:
    """Check a part URL's signature, that its session still takes parts and the body's
    declared length (refused before a byte is written); the part's writer, opened by its
    first write. One call, so one thread hop per part PUT."""
    now = services.now()
    services.signer.verify_part(grant, signature, now)
    upload_id, position, part_number = grant.upload_id, grant.position, grant.part_number
    with services.db.read_connection() as reads:
        row = reads.first(_PART_QUERY, {"upload": upload_id, "position": position})
    if row is None:
        raise NotFound(f"Upload session '{upload_id}' not found")
    state, expires_at, session_part_size, file_size, handle = row
    check_not_expired(upload_id, state, expires_at, now)
    if state not in ("open", "completing"):
        raise Conflict(f"Upload session '{upload_id}' is {state}; it takes no parts")
    stage = StagedFile(
        upload_id, position, file_size, part_size_for(file_size, session_part_size), handle
    )
    expected = stage.part_length(part_number)
    if content_length is not None and content_length.isascii() and content_length.isdigit():
        if int(content_length) > expected:
            raise PayloadTooLarge(
                f"Part {part_number} is {content_length} bytes, larger than its size of {expected}"
            )
        if int(content_length) < expected:
            raise ValidationError(
                f"Part {part_number} is {content_length} bytes; its size is {expected}"
            )
    length_known = content_length is not None
    return LazyPartWriter(
        lambda: store.open_part_writer(stage, part_number, length_known=length_known)
    )


class BodyLimits:
    """How many part bodies this process receives at once per part URL and per upload
    session: a client that opens bodies and sends little holds its own session's slots,
    never the service (server/serving/body_protocol.py bounds how long each may take)."""

    def __init__(self, per_part: int, per_session: int) -> None:
        self.per_part = per_part
        self.per_session = per_session
        self._parts: Counter[tuple[str, int, int]] = Counter()
        self._sessions: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, grant: PartGrant) -> Iterator[None]:
        """A slot for one body of ``grant``'s part while the block runs; TooManyRequests
        (429, which clients retry with backoff) when its part or session has none free."""
        part = (grant.upload_id, grant.position, grant.part_number)
        with self._lock:
            if self._parts[part] >= self.per_part:
                raise TooManyRequests(
                    f"Part {grant.part_number} of this file is already being received "
                    f"{self.per_part} times at once; retry later"
                )
            if self._sessions[grant.upload_id] >= self.per_session:
                raise TooManyRequests(
                    f"Upload '{grant.upload_id}' already sends {self.per_session} parts at "
                    "once; retry later, or send fewer at a time"
                )
            self._parts[part] += 1
            self._sessions[grant.upload_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._parts[part] -= 1
                self._sessions[grant.upload_id] -= 1
                self._parts += Counter()  # drops the zero counts
                self._sessions += Counter()


# A retry may start before the server has noticed its first try's connection went; the CLI
# sends up to 64 parts at once (more wait for a slot, retried).
BODY_LIMITS = BodyLimits(per_part=2, per_session=32)


# Each batch is one thread hop (and one pwritev); 4 MiB per hop measured ~0.5 CPU-s per
# 2 GiB cheaper than 1 MiB, and bounds what a request holds in memory.
_WRITE_BATCH = 4 * 1024 * 1024


async def receive_part(
    writer: LazyPartWriter,
    grant: PartGrant,
    body: AsyncIterator[bytes],
    checksum: str | None,
    into: ReceiveInto | None = None,
) -> str:
    """Write one part's body (of the length ``open_part`` checked) as it arrives, within
    ``BODY_LIMITS``; the part's ETag. ``into``, when the server offers it, receives the body
    in a worker thread instead of through ``body``."""
    try:
        with BODY_LIMITS.hold(grant):
            return await _receive(writer, body, checksum, into)
    except BaseException:
        writer.abort()
        raise


async def _receive(
    writer: LazyPartWriter,
    body: AsyncIterator[bytes],
    checksum: str | None,
    into: ReceiveInto | None,
) -> str:
    verify = checksum is not None
    if into is not None:
        # Straight from the socket in a worker thread (server/serving/body_protocol.py).
        # finish on the body's own thread: no thread hop of its own.
        return await into(
            lambda view: writer.write((view,), checksum=verify), lambda: writer.finish(checksum)
        )
    # Bodies arrive in small messages; each batch is written with one thread hop.
    pending: list[bytes] = []
    pending_size = 0
    async for chunk in body:
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= _WRITE_BATCH:
            await run_in_threadpool(writer.write, pending, checksum=verify)
            pending, pending_size = [], 0
    if pending:
        await run_in_threadpool(writer.write, pending, checksum=verify)
    return await run_in_threadpool(writer.finish, checksum)
