"""One part of an upload: its bytes read from disk as they go out, hashed into the file's
running SHA-256 on the way (``FileDigest``), PUT with retries and backoff.

A body (``PartBody``) goes out one of two ways. The client's own transport
(tracestore/client/sendfile.py) reads each ``SEND_CHUNK`` into one reused buffer, hashes it and has
the kernel send the same range from the file (``sendfile``): each byte copied in once and
hashed once. Any other httpx transport iterates the body: one ``os.pread`` per chunk handed
over as ``bytes`` (h11 passes ``bytes`` to the socket as they are but joins, i.e. copies, any
other buffer, so a reused buffer would add a copy there; measured), and the bytes are
copied out to the socket once more.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tracestore.client.local_files import LocalFile
from tracestore.client.retries import RETRY_STATUSES, RetryPolicy, api_error, network_error
from tracestore.client.transfers import ProgressCallback, ProgressEvent, Stopped
from tracestore.errors import IntegrityError, TracestoreError
from tracestore.filedigest import FileDigest, PartTransfer, ReadBack

SEND_CHUNK = 1024 * 1024
_THREAD = threading.local()


def _send_buffer() -> memoryview:
    """This thread's buffer for a part's chunks, reused part after part: a new one per part
    was a megabyte zeroed each time (~2 % of the client's CPU sending many small files)."""
    view: memoryview | None = getattr(_THREAD, "send_buffer", None)
    if view is None:
        view = _THREAD.send_buffer = memoryview(bytearray(SEND_CHUNK))
    return view


@dataclass(frozen=True)
class PartJob:
    """One part of a file: sent to ``url``, or, when the service already holds it
    (``held_etag``), only read to carry the file's hash past it."""

    file: LocalFile
    digest: FileDigest
    part_number: int
    offset: int
    size: int
    url: str = ""
    held_etag: str | None = None


def read_range(path: Path, offset: int, size: int, stop: threading.Event) -> Iterator[bytes]:
    """The bytes of ``path`` in ``[offset, offset + size)``, in ``SEND_CHUNK`` pieces."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = offset + size
        while offset < end:
            if stop.is_set():
                raise Stopped
            chunk = os.pread(fd, min(SEND_CHUNK, end - offset), offset)
            if not chunk:
                raise IntegrityError(f"{path} is shorter than when the upload started")
            offset += len(chunk)
            yield chunk
    finally:
        os.close(fd)


def read_back(path: Path, stop: threading.Event) -> ReadBack:
    """The ``FileDigest`` read-back of ``path``: for parts that finished out of turn."""

    def read(offset: int, length: int) -> Iterator[bytes]:
        return read_range(path, offset, length, stop)

    return read


def hash_held_part(job: PartJob, stop: threading.Event) -> None:
    """Carry the file's hash past a part the service already holds, without sending it."""
    assert job.held_etag is not None
    transfer = job.digest.transfer(job.part_number)
    try:
        if transfer.chained:  # read ahead of the upload already
            transfer.skip(job.size)
        else:
            for chunk in read_range(job.file.path, job.offset, job.size, stop):
                transfer.update(chunk)
        transfer.finish(job.held_etag)
    finally:
        transfer.abort()


class SendFailed(Exception):
    """The connection failed while a body was being sent (the ``OSError`` is ``error``);
    an error reading the local file is raised as it is."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class PartBody(httpx.SyncByteStream):
    """A part's bytes on their way out, each hashed into the file's running digest and
    counted as it goes. Any httpx transport iterates it (one ``os.pread`` per chunk); the
    client's own transport (tracestore/client/sendfile.py) calls ``send_to`` instead, which sends
    the bytes with ``sendfile`` and so never copies them into the socket itself."""

    def __init__(
        self,
        job: PartJob,
        transfer: PartTransfer,
        stop: threading.Event,
        step: Callable[[int], None],
    ) -> None:
        self.job = job
        self.transfer = transfer
        self.stop = stop
        self.step = step

    def __iter__(self) -> Iterator[bytes]:
        for chunk in read_range(self.job.file.path, self.job.offset, self.job.size, self.stop):
            # Counted before it is handed over: a transport need not ask for more after the
            # last.
            self.transfer.update(chunk)
            self.step(len(chunk))
            yield chunk

    def send_to(self, sock: socket.socket) -> None:
        """Send the part down ``sock``: each chunk read (into one reused buffer) and hashed,
        then sent from the file by the kernel; a failed send is ``SendFailed``. Should the
        file change meanwhile, the bytes sent and those hashed may differ: the service's
        hash then refuses the completion. A part hashed before the upload began (read
        ahead) goes without being read here at all."""
        job = self.job
        unread = self.transfer.chained
        buffer = memoryview(b"") if unread else _send_buffer()
        with open(job.file.path, "rb", buffering=0) as source:
            offset, end = job.offset, job.offset + job.size
            while offset < end:
                if self.stop.is_set():
                    raise Stopped
                if unread:
                    n = min(SEND_CHUNK, end - offset)
                    self.transfer.skip(n)
                else:
                    n = os.preadv(
                        source.fileno(), [buffer[: min(len(buffer), end - offset)]], offset
                    )
                    if n <= 0:
                        raise IntegrityError(
                            f"{job.file.path} is shorter than when the upload started"
                        )
                    self.transfer.update(buffer[:n])
                self.step(n)
                try:
                    sent = sock.sendfile(source, offset, n)
                except OSError as exc:
                    raise SendFailed(exc) from exc
                if sent != n:
                    raise IntegrityError(f"{job.file.path} is shorter than when the upload started")
                offset += n


def put_part(
    http: httpx.Client,
    job: PartJob,
    *,
    retry: RetryPolicy,
    stop: threading.Event,
    progress: ProgressCallback | None,
    total: int,
    fresh_url: Callable[[PartJob], str],
) -> str:
    """PUT one part, hashing its bytes as they go, retrying network errors and 5xx with
    backoff; the ETag it answered. A 403 (the URL expired during a long upload) is retried
    once with a fresh URL; a job without a URL asks ``fresh_url`` for its first."""
    url = job.url or fresh_url(job)
    refreshed = False
    last: TracestoreError | None = None
    tries = retry.tries(stop)
    while True:
        sent = 0
        transfer = job.digest.transfer(job.part_number)

        def step(n: int) -> None:
            nonlocal sent
            sent += n
            if progress:
                progress(ProgressEvent("upload", job.file.name, n, total))

        try:
            # The client's headers and timeouts, with the body as a stream of its own.
            built = http.build_request(
                "PUT",
                url,
                headers={
                    "Content-Length": str(job.size),
                    "Content-Type": "application/octet-stream",
                },
            )
            request = httpx.Request(
                "PUT",
                built.url,
                headers=built.headers,
                stream=PartBody(job, transfer, stop, step),
                extensions=built.extensions,
            )
            response = http.send(request)
        except httpx.TransportError as exc:
            last = network_error(exc, url)
        else:
            if response.status_code == 200:
                etag = str(response.headers.get("etag", "")).strip('"')
                try:
                    transfer.finish(etag)
                except ValueError as exc:  # the service took fewer bytes than the part has
                    raise IntegrityError(f"{job.file.name}: {exc}") from None
                return etag
            error = api_error(response)
            if response.status_code == 403 and not refreshed:
                url, refreshed = fresh_url(job), True
            elif response.status_code not in RETRY_STATUSES:
                raise error
            last = error
        finally:
            transfer.abort()  # no-op after finish; an attempt that failed counts for nothing
        if sent and progress:
            progress(ProgressEvent("upload", job.file.name, -sent, total))
        if stop.is_set():
            raise Stopped
        assert last is not None
        tries.failed(last)
