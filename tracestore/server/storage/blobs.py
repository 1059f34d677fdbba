"""Where bytes live: the store protocols and what their implementations share.

A store has two concerns, each a small protocol. ``StagingArea`` holds an upload's bytes
while it is open: each file staged in parts, in any order, then sealed (its staged bytes
hashed). ``ContentStore`` holds blobs, content-addressed by SHA-256 and shared by every file
whose bytes are equal. ``BlobStore`` is one backend doing both, plus the two operations
that span them. Code that needs only one concern is typed with the narrow protocol. The
embedded store (``localblobs.py``) implements them in a directory, the S3 store
(``s3blobs.py``) with real multipart uploads.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable
from urllib.parse import quote

CHUNK = 4 * 1024 * 1024
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a blob id
UPLOAD_ID = re.compile(r"upload_[A-Za-z0-9]+")


@dataclass(frozen=True)
class StagedFile:
    """One file of an upload session, as the store stages it."""

    upload_id: str
    position: int
    size: int
    part_size: int
    handle: str | None = None  # store-specific, e.g. an S3 multipart UploadId

    @property
    def part_count(self) -> int:
        return max(1, -(-self.size // self.part_size))

    def part_length(self, part_number: int) -> int:
        if not 1 <= part_number <= self.part_count:
            raise ValueError(f"part {part_number} out of range 1..{self.part_count}")
        if part_number < self.part_count:
            return self.part_size
        return self.size - self.part_size * (self.part_count - 1)


@dataclass(frozen=True)
class StoredPart:
    part_number: int
    size: int
    etag: str


@dataclass(frozen=True)
class CommittedBlob:
    sha256: str
    size: int


class FileLargerThanDeclared(Exception):
    """The staged bytes of a file exceed its declared size (``size`` is how many there are).

    Internal to the server, not a ``TracestoreError``: completion, which knows the file's
    name, turns it into the ``PayloadTooLarge`` the caller sees."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the staged file is {size} bytes, larger than declared")
        self.size = size


@runtime_checkable
class StagingArea(Protocol):
    """Where an upload's files are staged, part by part, until completion seals them."""

    def stage_file(
        self, upload_id: str, position: int, size: int, part_size: int, content_type: str | None
    ) -> StagedFile:
        """Make room for one file of an upload; the handle every other call takes."""
        ...

    def part_url(
        self, staged: StagedFile, part_number: int, expires_at: datetime, *, base_url: str
    ) -> str:
        """A presigned URL the client PUTs one part's bytes to. ``base_url`` is where the
        caller reaches this service (a store whose URLs the service answers builds on it;
        an object store, answering its own, ignores it)."""
        ...

    def part_origin(self) -> str | None:
        """The origin (``scheme://host:port``) of the part URLs when it is not this
        service's (an object store's): where a browser sends parts, which the page's policy
        must allow. None when the service answers its part URLs itself."""
        ...

    def list_parts(self, staged: Sequence[StagedFile]) -> list[dict[int, StoredPart]]:
        """The parts received so far of each file, by number (of one upload's files, the
        store reads what holds them once: completion lists every file of an upload)."""
        ...

    def seal_file(
        self, staged: StagedFile, etags: Mapping[int, str], *, heartbeat: Callable[[], None] = ...
    ) -> CommittedBlob:
        """Assemble and hash the staged bytes (the parts named by ``etags``); nothing is
        placed yet. Repeatable: a completion cut off anywhere seals again. Raises
        ``FileLargerThanDeclared`` when the bytes exceed the file's size."""
        ...

    def discard_staging(self, staged: Sequence[StagedFile]) -> None:
        """Remove every staged byte of the files; harmless when there are none."""
        ...

    def staged_uploads(self) -> Iterator[str]:
        """Upload ids that hold staged state (for the sweeper's orphan check)."""
        ...

    def discard_upload(self, upload_id: str) -> None:
        """Remove every staged byte of every file of an upload, knowing only its id (an
        upload whose process died before the database recorded it); harmless when none."""
        ...


@runtime_checkable
class ContentStore(Protocol):
    """Blobs by SHA-256: each stored once, read, handed out by URL, deleted by the purge."""

    def blob_exists(self, sha256: str) -> bool: ...

    def open_blob(self, sha256: str) -> BinaryIO:
        """The blob's bytes, seekable; FileNotFoundError when it is not stored."""
        ...

    def delete_blob(self, sha256: str) -> None: ...

    def blob_key(self, sha256: str) -> str:
        """The blob's key inside the store (what ``resolve`` reports)."""
        ...

    def blob_uri(self, sha256: str) -> str:
        """Where a host that reads the store directly finds the blob."""
        ...

    def download_url(
        self, sha256: str, *, filename: str, expires_at: datetime, base_url: str
    ) -> str:
        """A presigned URL that answers the blob as an attachment named ``filename``
        (``base_url`` as for ``StagingArea.part_url``)."""
        ...


@runtime_checkable
class BlobStore(StagingArea, ContentStore, Protocol):
    """One backend holding both areas: what ``Services.store`` is.

    ``place_file`` lives here, not on either narrow protocol, because it is the one step
    that reads the staging area and writes the content area (a local link, an S3 copy); a
    store that kept the two areas apart would have to implement it across both. ``check``
    lives here because readiness is the backend's as a whole, not either area's.
    """

    def place_file(
        self, staged: StagedFile, blob: CommittedBlob, *, heartbeat: Callable[[], None] = ...
    ) -> None:
        """Store sealed bytes at their SHA-256's address, unless a blob is there already.
        Only once the database protects the blob from a concurrent purge (completion pins
        every sealed blob before it places any)."""
        ...

    def check(self, *, write: bool = False) -> None:
        """Raise unless the backend answers (the readiness probe), and with ``write`` takes
        an object too (the start-up check); ServiceUnavailable says what to fix."""
        ...


def normalise_etag(etag: str) -> str:
    return etag.strip().strip('"')


def private_directory(path: Path) -> None:
    """Create ``path`` and any missing parents readable by the service's user alone (0700):
    stored traces are the tenants' data, whatever the umask (``Path.mkdir`` gives parents
    the default mode)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)


def content_disposition(filename: str) -> str:
    base = filename.rsplit("/", 1)[-1]
    return f"attachment; filename*=UTF-8''{quote(base)}"
