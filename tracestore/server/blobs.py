"""Where bytes live: the BlobStore protocol and the embedded LocalBlobStore.

Blobs are content-addressed by SHA-256 and shared by every file whose bytes are equal. An
upload first lands in a *staging* area, one part at a time, in any order; ``commit_file``
hashes the staged bytes and moves them into the content-addressed area. The S3 store
(``s3blobs.py``) implements the same protocol with real multipart uploads.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import quote, urlencode

from tracestore.errors import Forbidden, PayloadTooLarge, ValidationError

CHUNK = 4 * 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


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


class FileLargerThanDeclared(PayloadTooLarge):
    """The staged bytes of a file exceed its declared size."""


class BlobStore(Protocol):
    """What the service needs from a place that keeps bytes."""

    kind: str

    def stage_file(
        self, upload_id: str, position: int, size: int, part_size: int, content_type: str | None
    ) -> StagedFile: ...

    def part_url(self, staged: StagedFile, part_number: int, expires_at: datetime) -> str: ...

    def list_parts(self, staged: StagedFile) -> dict[int, StoredPart]: ...

    def commit_file(
        self,
        staged: StagedFile,
        etags: Mapping[int, str],
        *,
        heartbeat: Callable[[], None] = ...,
        pin: Callable[[str, int], None] = ...,
    ) -> CommittedBlob:
        """Assemble and hash the staged bytes and store them at their SHA-256's address.
        ``pin(sha256, size)`` is called after hashing and before the bytes are placed, so
        the database protects the blob from a concurrent purge before it is stored."""
        ...

    def discard_staging(self, staged: StagedFile) -> None: ...

    def blob_exists(self, sha256: str) -> bool: ...

    def open_blob(self, sha256: str) -> BinaryIO: ...

    def delete_blob(self, sha256: str) -> None: ...

    def blob_key(self, sha256: str) -> str: ...

    def blob_uri(self, sha256: str) -> str: ...

    def download_url(self, sha256: str, *, filename: str, expires_at: datetime) -> str: ...

    def check(self) -> None: ...


def normalise_etag(etag: str) -> str:
    return etag.strip().strip('"')


class UrlSigner:
    """HMAC-SHA256 signatures for the embedded store's presigned URLs."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def sign(self, *fields: str | int) -> str:
        message = "\n".join(str(f) for f in fields).encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def verify(self, signature: str, expires: int, now: datetime, *fields: str | int) -> None:
        """Raise Forbidden unless ``signature`` matches and ``expires`` is in the future."""
        expected = self.sign(expires, *fields)
        if not hmac.compare_digest(expected, signature):
            raise Forbidden("The URL signature does not match; request a new URL")
        if now.timestamp() >= expires:
            raise Forbidden("The URL has expired; request a new URL")


class LocalBlobStore:
    """Blobs in a directory; the service itself serves the presigned part and download URLs.

    Layout: ``blobs/ab/cd/<sha256>`` for content, ``staging/<upload>/<position>/`` for parts,
    each part a file ``<number>.<etag>`` written under a temporary name and renamed into
    place, so a failed PUT never replaces a good part.
    """

    kind = "local"

    def __init__(self, root: Path, public_url: str, signer: UrlSigner) -> None:
        self.root = root.resolve()
        self.public_url = public_url.rstrip("/")
        self.signer = signer
        self._blobs = self.root / "blobs"
        self._staging = self.root / "staging"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._staging.mkdir(parents=True, exist_ok=True)

    # --- staging ---

    def _staging_dir(self, upload_id: str, position: int) -> Path:
        if not re.fullmatch(r"upload_[A-Za-z0-9]+", upload_id):
            raise ValidationError(f"Invalid upload id {upload_id!r}")
        return self._staging / upload_id / str(position)

    def stage_file(
        self, upload_id: str, position: int, size: int, part_size: int, content_type: str | None
    ) -> StagedFile:
        directory = self._staging_dir(upload_id, position)
        directory.mkdir(parents=True, exist_ok=True)
        # The file's bytes land here, each part at its offset (sparse until written).
        with open(directory / DATA_FILE, "ab") as data:
            data.truncate(size)
        return StagedFile(upload_id, position, size, part_size)

    def part_url(self, staged: StagedFile, part_number: int, expires_at: datetime) -> str:
        size = staged.part_length(part_number)
        expires = int(expires_at.timestamp())
        fields = (staged.upload_id, staged.position, part_number, size, staged.part_size)
        query = urlencode(
            {
                "size": size,
                "partSize": staged.part_size,
                "expires": expires,
                "signature": self.signer.sign(expires, "PUT", *fields),
            }
        )
        return (
            f"{self.public_url}/blobs/parts/{staged.upload_id}/{staged.position}/"
            f"{part_number}?{query}"
        )

    def verify_part_url(
        self,
        upload_id: str,
        position: int,
        part_number: int,
        size: int,
        part_size: int,
        expires: int,
        signature: str,
        now: datetime,
    ) -> None:
        self.signer.verify(
            signature, expires, now, "PUT", upload_id, position, part_number, size, part_size
        )

    def list_parts(self, staged: StagedFile) -> dict[int, StoredPart]:
        found: dict[int, StoredPart] = {}
        directory = self._staging_dir(staged.upload_id, staged.position)
        if not directory.is_dir():
            return {}
        for entry in os.scandir(directory):
            if entry.is_dir() and entry.name.isdigit():
                number = int(entry.name)
                if 1 <= number <= staged.part_count:
                    part = _stored_part(Path(entry.path), number, staged.part_length(number))
                    if part is not None:
                        found[number] = part
        return found

    def open_part_writer(
        self, staged: StagedFile, part_number: int, *, length_known: bool
    ) -> PartWriter:
        """A writer for one part. The first send of a part whose length is known up front
        is written straight into the file at its offset; a re-send, or a body of unknown
        length, goes to a file of its own, so a failed send never spoils a part received
        before."""
        directory = self._staging_dir(staged.upload_id, staged.position)
        if not (directory / DATA_FILE).is_file():
            raise ValidationError("The upload session has no staging area; it may have ended")
        part_dir = directory / f"{part_number:05d}"
        part_dir.mkdir(exist_ok=True)
        expected = staged.part_length(part_number)
        if length_known:
            claim = part_dir / CLAIM_FILE
            try:
                os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                pass  # sent before, or being sent now: this send goes to a file of its own
            else:
                offset = (part_number - 1) * staged.part_size
                return PartWriter(part_dir, part_number, expected, offset=offset, claim=claim)
        return PartWriter(part_dir, part_number, expected)

    def commit_file(
        self,
        staged: StagedFile,
        etags: Mapping[int, str],
        *,
        heartbeat: Callable[[], None] = lambda: None,
        pin: Callable[[str, int], None] = lambda sha256, size: None,
    ) -> CommittedBlob:
        directory = self._staging_dir(staged.upload_id, staged.position)
        data_path = directory / DATA_FILE
        with open(data_path, "r+b") as data:
            for number in range(1, staged.part_count + 1):
                etag = normalise_etag(etags[number])
                part_dir = directory / f"{number:05d}"
                separate = part_dir / f"{etag}{SEPARATE_SUFFIX}"
                if separate.is_file():
                    # A part sent again: copy its bytes over the first send's.
                    if separate.stat().st_size > staged.part_length(number):
                        raise FileLargerThanDeclared(f"{staged.size + 1}")
                    with open(separate, "rb") as source:
                        data.seek((number - 1) * staged.part_size)
                        shutil.copyfileobj(source, data, CHUNK)
                elif not (part_dir / etag).is_file():
                    raise ValidationError(f"Part {number} with ETag {etag!r} is not stored")
        total = data_path.stat().st_size
        if total > staged.size:
            raise FileLargerThanDeclared(f"{total}")
        digest = hashlib.sha256()
        with open(data_path, "rb") as source:
            _hash_stream(source, digest, heartbeat)
        sha256 = digest.hexdigest()
        pin(sha256, total)
        # Linked, not moved, so a completion that dies before the database records it can
        # be retried from the staged bytes.
        self._adopt(data_path, sha256)
        return CommittedBlob(sha256, total)

    def _adopt(self, path: Path, sha256: str) -> None:
        """Link ``path`` at the blob's address unless the blob is there already."""
        target = self._blob_path(sha256)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(path, target)

    def discard_staging(self, staged: StagedFile) -> None:
        shutil.rmtree(self._staging_dir(staged.upload_id, staged.position), ignore_errors=True)
        with contextlib.suppress(OSError):  # other files of the upload may remain
            (self._staging / staged.upload_id).rmdir()

    # --- blobs ---

    def _blob_path(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValidationError(f"Invalid blob id {sha256!r}")
        return self._blobs / sha256[:2] / sha256[2:4] / sha256

    def blob_exists(self, sha256: str) -> bool:
        return self._blob_path(sha256).is_file()

    def blob_size(self, sha256: str) -> int:
        return self._blob_path(sha256).stat().st_size

    def open_blob(self, sha256: str) -> BinaryIO:
        return open(self._blob_path(sha256), "rb")

    def delete_blob(self, sha256: str) -> None:
        self._blob_path(sha256).unlink(missing_ok=True)

    def blob_key(self, sha256: str) -> str:
        return str(self._blob_path(sha256).relative_to(self.root))

    def blob_uri(self, sha256: str) -> str:
        return self._blob_path(sha256).as_uri()

    def download_url(self, sha256: str, *, filename: str, expires_at: datetime) -> str:
        expires = int(expires_at.timestamp())
        signature = self.signer.sign(expires, "GET", sha256, filename)
        query = urlencode({"name": filename, "expires": expires, "signature": signature})
        return f"{self.public_url}/blobs/content/{sha256}?{query}"

    def verify_download_url(
        self, sha256: str, filename: str, expires: int, signature: str, now: datetime
    ) -> None:
        self.signer.verify(signature, expires, now, "GET", sha256, filename)

    def check(self) -> None:
        probe = self._staging / f".probe-{secrets.token_hex(4)}"
        probe.write_bytes(b"ok")
        probe.unlink()

    def staged_uploads(self) -> Iterator[str]:
        """Upload ids that have a staging area (for the sweeper's orphan check)."""
        for entry in os.scandir(self._staging):
            if entry.is_dir():
                yield entry.name


def content_disposition(filename: str) -> str:
    base = filename.rsplit("/", 1)[-1]
    return f"attachment; filename*=UTF-8''{quote(base)}"


DATA_FILE = "data"
CLAIM_FILE = "claim"
SEPARATE_SUFFIX = ".part"
_ETAG = re.compile(r"[0-9a-f]{32}")


def _stored_part(part_dir: Path, number: int, length: int) -> StoredPart | None:
    """The part recorded in ``part_dir``: an empty ``<etag>`` entry for bytes written in
    place, or ``<etag>.part`` holding a re-send's bytes; the newest if there are two."""
    newest: tuple[int, StoredPart] | None = None
    for entry in os.scandir(part_dir):
        etag, _, suffix = entry.name.partition(".")
        if not _ETAG.fullmatch(etag) or suffix not in ("", SEPARATE_SUFFIX[1:]):
            continue
        stat = entry.stat()
        part = StoredPart(number, stat.st_size if suffix else length, etag)
        if newest is None or stat.st_mtime_ns >= newest[0]:
            newest = (stat.st_mtime_ns, part)
    return newest[1] if newest else None


class PartWriter:
    """Receives one part into its directory. In place (``offset`` given): bytes go straight
    into the staged file and an empty ``<etag>`` entry records the part once complete.
    Otherwise bytes go to a temporary file renamed to ``<etag>.part`` once complete."""

    def __init__(
        self,
        part_dir: Path,
        part_number: int,
        expected_size: int,
        *,
        offset: int | None = None,
        claim: Path | None = None,
    ) -> None:
        self.part_dir = part_dir
        self.part_number = part_number
        self.expected_size = expected_size
        self.received = 0
        self._digest = hashlib.sha256()
        self._offset = offset
        self._claim = claim
        if offset is None:
            self._tmp: Path | None = part_dir / f"tmp{secrets.token_hex(6)}"
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        else:
            self._tmp = None
            self._fd = os.open(part_dir.parent / DATA_FILE, os.O_WRONLY)

    def write(self, data: bytes, *, hash_it: bool) -> None:
        if self.received + len(data) > self.expected_size:
            raise PayloadTooLarge(
                f"Part {self.part_number} is larger than its declared size of "
                f"{self.expected_size} bytes"
            )
        if hash_it:
            self._digest.update(data)
        view = memoryview(data)
        while view:
            if self._offset is None:
                written = os.write(self._fd, view)
            else:
                written = os.pwrite(self._fd, view, self._offset + self.received)
            self.received += written
            view = view[written:]

    def finish(self, checksum_b64: str | None) -> str:
        """Check size (and checksum when given), then record the part; its ETag."""
        if self.received != self.expected_size:
            raise ValidationError(
                f"Part {self.part_number} has {self.received} bytes; expected {self.expected_size}"
            )
        if checksum_b64 is not None:
            actual = base64.b64encode(self._digest.digest()).decode()
            if not hmac.compare_digest(actual, checksum_b64.strip()):
                raise ValidationError(
                    f"Part {self.part_number}: x-amz-checksum-sha256 {checksum_b64.strip()} "
                    f"does not match the received bytes ({actual})"
                )
        os.close(self._fd)
        etag = secrets.token_hex(16)
        if self._tmp is None:
            final = self.part_dir / etag
            final.touch()
        else:
            final = self.part_dir / f"{etag}{SEPARATE_SUFFIX}"
            os.replace(self._tmp, final)
        for entry in os.scandir(self.part_dir):
            stale = entry.name.partition(".")[0]
            if entry.path != str(final) and _ETAG.fullmatch(stale):
                os.unlink(entry.path)
        self._claim = None  # the claim stays: later sends of this part are re-sends
        return etag

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        if self._claim is not None:
            # A failed first send: the next send of this part may write in place again.
            self._claim.unlink(missing_ok=True)
            self._claim = None


def _hash_stream(
    source: BinaryIO,
    digest: hashlib._Hash,
    heartbeat: Callable[[], None],
    out: BinaryIO | None = None,
) -> None:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    since_beat = 0
    while True:
        n = source.readinto(view)  # type: ignore[attr-defined]
        if not n:
            break
        digest.update(view[:n])
        if out is not None:
            out.write(view[:n])
        since_beat += n
        if since_beat >= 256 * CHUNK:
            heartbeat()
            since_beat = 0
