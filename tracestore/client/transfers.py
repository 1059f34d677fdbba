"""Moving bytes for the client: a transfer's progress and stop, and the verified, resumable GET
of one file (part PUTs are in ``parts``, retries in ``retries``, local files in
``local_files``).

Nothing here holds a whole file in memory: bodies are streamed in ``CHUNK``-sized pieces,
so the client's memory does not grow with file size.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple

import httpx

from tracestore.client.local_files import file_digest
from tracestore.client.retries import RETRY_STATUSES, RetryPolicy, api_error, network_error
from tracestore.errors import IntegrityError, NetworkError, TracestoreError

CHUNK = 1024 * 1024

Phase = Literal["upload", "complete", "download"]


class ProgressEvent(NamedTuple):
    """One step of a transfer: ``advance`` bytes of ``file`` (negative when a retry rewinds).
    The ``complete`` phase has two events: 0 when the service starts verifying the upload,
    ``total`` when it is done."""

    phase: Phase
    file: str
    advance: int
    total: int


ProgressCallback = Callable[[ProgressEvent], None]


class UploadInterrupted(KeyboardInterrupt):
    """Ctrl-C during an upload; the session stays open and ``upload_id`` resumes it."""

    def __init__(self, upload_id: str, traceset_id: str) -> None:
        super().__init__(upload_id)
        self.upload_id = upload_id
        self.traceset_id = traceset_id


class Stopped(Exception):
    """The transfer was asked to stop (Ctrl-C in the main thread)."""


# --- downloads ---

# A GET carrying this request extension may have its 200/206 body handed straight to the
# ``BodySink`` by a transport that can (the client's own, sendfile.py); the response then
# says so with the same extension set to True and carries no content.
BODY_SINK = "tracestore.body_sink"


class BodySink:
    """One file's bytes as they arrive: written to its ``.partial`` file, hashed and counted
    against the size the service recorded."""

    def __init__(
        self,
        partial: Path,
        size: int,
        *,
        name: str,
        stop: threading.Event | None,
        progress: ProgressCallback | None,
        label: str,
        total: int,
    ) -> None:
        self.partial = partial
        self.size = size
        self.name = name
        self.stop = stop
        self.progress = progress
        self.label = label
        self.total = total
        self.digest = hashlib.sha256()
        self.have = 0
        self._out: BinaryIO | None = None
        if partial.exists():
            if partial.stat().st_size > size:
                partial.unlink()
            else:
                # The bytes already there count towards the hash: read them once.
                self.digest = file_digest(partial)
                self.have = partial.stat().st_size
        if progress and self.have:
            progress(ProgressEvent("download", label, self.have, total))

    def begin(self, status: int) -> None:
        """The answer is ``status`` (200 or 206): open the partial file to take its body."""
        self.close()
        if self.have and status == 200:
            # The server ignored the range: start over.
            if self.progress:
                self.progress(ProgressEvent("download", self.label, -self.have, self.total))
            self.digest, self.have = hashlib.sha256(), 0
        self._out = open(self.partial, "ab" if self.have else "wb")  # noqa: SIM115

    def write(self, block: bytes | memoryview) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped
        if self.have + len(block) > self.size:
            raise IntegrityError(
                f"{self.name} is larger than the {self.size} bytes the service recorded"
            )
        assert self._out is not None, "begin() first"
        self._out.write(block)
        self.digest.update(block)
        self.have += len(block)
        if self.progress:
            self.progress(ProgressEvent("download", self.label, len(block), self.total))

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def download_to(
    http: httpx.Client,
    url: Callable[[], str],
    destination: Path,
    *,
    size: int,
    sha256: str | None,
    retry: RetryPolicy,
    progress: ProgressCallback | None = None,
    label: str = "",
    total: int = 0,
    stop: threading.Event | None = None,
) -> Path:
    """Fetch into ``destination`` through a ``.partial`` file that a later call resumes with
    a Range request; verify size and SHA-256 before the file takes its final name. Setting
    ``stop`` ends the transfer after the current block (the partial file stays)."""
    partial = destination.with_name(destination.name + ".partial")
    destination.parent.mkdir(parents=True, exist_ok=True)
    sink = BodySink(
        partial,
        size,
        name=label or destination.name,
        stop=stop,
        progress=progress,
        label=label,
        total=total,
    )
    current = url()
    last: TracestoreError | None = None
    tries = retry.tries(stop)
    while sink.have < size or (size == 0 and not partial.exists()):
        had = sink.have
        headers = {"Range": f"bytes={sink.have}-"} if sink.have else {}
        try:
            request = http.build_request(
                "GET", current, headers=headers, extensions={BODY_SINK: sink}
            )
            response = http.send(request, stream=True)
            try:
                if response.status_code not in (200, 206):
                    response.read()
                    raise api_error(response)
                if response.extensions.get(BODY_SINK) is not True:
                    # A transport that streams through httpx (a caller's own client).
                    sink.begin(response.status_code)
                    for block in response.iter_bytes(CHUNK):
                        sink.write(block)
            finally:
                response.close()
            if sink.have < size:
                raise NetworkError(f"The download of {label} ended early at {sink.have} bytes")
            last = None
        except httpx.TransportError as exc:
            last = network_error(exc, current)
        except NetworkError as exc:
            last = exc
        except TracestoreError as exc:
            if exc.status == 403 and not tries.last_try:
                current, last = url(), exc
            elif exc.status in RETRY_STATUSES:
                last = exc
            else:
                raise
        finally:
            sink.close()
        if last is not None:
            if sink.have > had:  # bytes came: failing starts anew
                tries.progressed()
            tries.failed(last)
    if sha256 is not None and sink.digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"SHA-256 of the downloaded {label or destination.name} is "
            f"{sink.digest.hexdigest()}, not the {sha256} the service recorded; the download "
            "was discarded"
        )
    os.replace(partial, destination)
    return destination
