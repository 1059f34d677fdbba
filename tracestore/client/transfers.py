"""Moving bytes for the client: local files, progress, retries, errors, verified GETs (part
PUTs are in ``parts``).

Nothing here holds a whole file in memory: bodies are streamed in ``CHUNK``-sized pieces,
so the client's memory does not grow with file size.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple

import httpx

from tracestore import jsontext, schemas
from tracestore.errors import (
    ERRORS_BY_CODE,
    ERRORS_BY_STATUS,
    IntegrityError,
    NetworkError,
    TracestoreError,
    ValidationError,
)
from tracestore.readahead import walk_files

CHUNK = 1024 * 1024
HASH_CHUNK = 4 * 1024 * 1024
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

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


class RetryWait(NamedTuple):
    """A retry about to wait: why (the error of the try that failed), which try comes next
    (2 for the first retry), the seconds until it, and whether the service had answered
    before (if not, the URL may be wrong rather than the service restarting)."""

    reason: TracestoreError
    attempt: int
    delay: float
    reached: bool = True


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a network error or a 5xx answer: with backoff,
    until ``attempts`` tries or until it has failed for ``patience`` seconds, whichever comes
    first. The default rides out a service restart of half a minute. A service that has not
    answered once (a wrong URL, nothing listening) gets ``unreached_patience`` seconds
    instead: waiting a minute for it helps nobody. ``on_wait`` hears of every wait (the
    command line says it is waiting)."""

    attempts: int = 100
    base_delay: float = 0.25
    max_delay: float = 5.0
    patience: float = 60.0
    unreached_patience: float = 2.5
    on_wait: Callable[[RetryWait], None] | None = field(default=None, compare=False)

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter, so parallel retries do not march in step."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))

    def gives_up(self, attempt: int, failing_since: float, *, reached: bool = True) -> bool:
        """Whether try ``attempt`` (from 0), which just failed, was the last: the tries are
        used up, or the first failure was ``patience`` seconds ago (``failing_since``, by
        ``time.monotonic()``; a try that takes long is not failing while it runs), or
        ``unreached_patience`` seconds ago when the service never ``reached`` answered."""
        return attempt + 1 >= self.attempts or self.patience_left(failing_since, reached) <= 0

    def patience_left(self, failing_since: float, reached: bool = True) -> float:
        """Seconds of patience left for a request failing since ``failing_since``."""
        patience = self.patience if reached else min(self.patience, self.unreached_patience)
        return patience - (time.monotonic() - failing_since)

    def wait(
        self,
        attempt: int,
        reason: TracestoreError,
        stop: threading.Event | None = None,
        *,
        reached: bool = True,
        at_most: float = math.inf,
    ) -> None:
        """Sleep before try ``attempt + 1`` (cut short when ``stop`` is set), no longer than
        ``at_most`` seconds (the patience left: the last try comes before it runs out)."""
        delay = min(self.delay(attempt), at_most)
        if self.on_wait is not None:
            self.on_wait(RetryWait(reason, attempt + 2, delay, reached))
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)

    def tries(self, stop: threading.Event | None = None) -> Retries:
        """The count of one request's tries under this policy."""
        return Retries(self, stop)


@dataclass
class Retries:
    """The tries of one request (an API call, a part PUT, a download) under ``policy``: the
    one retry loop of the client. After a try fails, ``failed`` waits before the next or
    raises the error when that try was the last; ``progressed`` starts over (bytes came)."""

    policy: RetryPolicy
    stop: threading.Event | None = None
    attempt: int = 0
    failing_since: float | None = None

    def failed(
        self, error: TracestoreError, *, reached: bool = True, since: float | None = None
    ) -> None:
        """Wait before the next try, or raise ``error`` when the policy gives up (sooner
        when the service was never ``reached``). ``since``: when the try that failed began,
        for a try that failed all along (a connection that timed out)."""
        self.failing_since = self.failing_since or since or time.monotonic()
        if self.policy.gives_up(self.attempt, self.failing_since, reached=reached):
            raise error from None
        left = self.policy.patience_left(self.failing_since, reached)
        self.policy.wait(self.attempt, error, self.stop, reached=reached, at_most=left)
        self.attempt += 1

    def progressed(self) -> None:
        """The failing try moved bytes: count its failures anew."""
        self.attempt, self.failing_since = 0, None

    @property
    def last_try(self) -> bool:
        """Whether the next try is the last the policy allows by count."""
        return self.attempt + 1 >= self.policy.attempts


def api_error(response: httpx.Response) -> TracestoreError:
    """The tracestore exception for an error answer, mapped by its envelope's code."""
    code = message = request_id = None
    try:
        error = response.json().get("error") or {}
        code, message, request_id = error.get("code"), error.get("message"), error.get("requestId")
    except (ValueError, AttributeError):
        pass
    cls = ERRORS_BY_CODE.get(str(code)) or ERRORS_BY_STATUS.get(response.status_code)
    if cls is None:
        cls = TracestoreError
    if not message:
        text = response.text.strip().replace("\n", " ")[:200]
        message = f"HTTP {response.status_code} from {response.request.url.host}: {text}"
    return cls(
        str(message),
        request_id=request_id or response.headers.get("x-request-id"),
        status=response.status_code,
    )


def network_error(exc: httpx.TransportError, url: httpx.URL | str) -> NetworkError:
    return NetworkError(f"Cannot reach {_origin(url)}: {exc or type(exc).__name__}")


def unreached_error(exc: httpx.TransportError, base_url: str) -> NetworkError:
    """The error for a service that never answered: what went wrong connecting to
    ``base_url`` and, in the same line, what of the URL to check."""
    cause = _os_error(exc)
    if isinstance(cause, socket.gaierror):
        host = httpx.URL(base_url).host
        why = f"no host named {host} is known ({cause.strerror or cause}); check the host name"
    elif isinstance(cause, ConnectionRefusedError):
        why = "connection refused; check the port, and that the service is running"
    elif isinstance(exc, httpx.ConnectTimeout):
        why = "connecting timed out; check the host and the port (a firewall may drop them)"
    else:
        why = f"{exc or type(exc).__name__}; check the host and the port"
    return NetworkError(f"Nothing has answered at {base_url}: {why}")


def _origin(url: httpx.URL | str) -> str:
    where = httpx.URL(str(url))
    return f"{where.scheme}://{where.host}" + (f":{where.port}" if where.port else "")


def _os_error(exc: BaseException) -> OSError | None:
    """The operating system's error under a transport error (httpx and httpcore wrap it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


# --- local files ---


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its name in the traceset, where it is, its size and role, and its
    modification time when it was found (a later one means it changed meanwhile)."""

    name: str
    path: Path
    size: int
    role: schemas.Role
    mtime_ns: int

    def changed(self) -> bool:
        """Whether the file's size or modification time differ from when it was found;
        raises ``IntegrityError`` if its size does."""
        now = self.path.stat()
        if now.st_size != self.size:
            raise IntegrityError(
                f"{self.path} changed size while it was being uploaded "
                f"({self.size} bytes, now {now.st_size})"
            )
        return now.st_mtime_ns != self.mtime_ns


def collect_files(paths: Sequence[str | os.PathLike[str]], role: schemas.Role) -> list[LocalFile]:
    """Files named by ``paths``; a directory contributes its files, named relative to it."""
    found: list[LocalFile] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise ValidationError(f"{path} does not exist")
        if not (path.is_dir() or path.is_file()):
            raise ValidationError(f"{path} is neither a file nor a directory")
        found += [_local(name, member, role) for name, member in walk_files(path)]
    return found


def _local(name: str, path: Path, role: schemas.Role) -> LocalFile:
    stat = path.stat()
    return LocalFile(name, path, stat.st_size, role, stat.st_mtime_ns)


def check_names(files: Sequence[LocalFile]) -> None:
    """Refuse names the service would refuse (duplicates and names that collide on disk
    included) before any request is made."""
    seen: dict[str, Path] = {}
    for file in files:
        problem = schemas.file_name_problem(file.name)
        if problem:
            raise ValidationError(f"File name {file.name!r} ({file.path}) {problem}")
        if file.name in seen:
            raise ValidationError(
                f"File name {file.name!r} is given twice: {seen[file.name]} and {file.path}"
            )
        seen[file.name] = file.path
    collision = schemas.name_collision(seen)
    if collision:
        raise ValidationError(collision)


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file."""
    return file_digest(path).hexdigest()


def file_digest(path: Path) -> hashlib._Hash:
    """The SHA-256 state after a file's bytes, read once in large chunks into one reused
    buffer (a download resumed from a partial file goes on from it)."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as source:
        while n := source.readinto(view):
            digest.update(view[:n])
    return digest


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


def body_text(value: object) -> bytes:
    """A request body as JSON, with workloadMetadata numbers exactly as written."""
    return jsontext.dumps(value).encode()
