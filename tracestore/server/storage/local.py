"""The embedded blob store: blobs and staged uploads in a directory, the part and download
URLs served by the service itself (the protocols it implements are in ``blobs.py``)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from tracestore.errors import ServiceUnavailable, ValidationError, quoted
from tracestore.server.presigned import PartGrant, UrlSigner
from tracestore.server.storage.blobs import (
    CHUNK,
    SHA256_HEX,
    UPLOAD_ID,
    CommittedBlob,
    FileLargerThanDeclared,
    StagedFile,
    StoredPart,
    normalise_etag,
    private_directory,
)
from tracestore.server.storage.staging import (
    DATA_FILE,
    ETAG,
    SEPARATE_SUFFIX,
    PartWriter,
    StagedDigests,
    StagedPlace,
    locked,
    recorded_parts,
    stored_parts,
    take_claim,
)


class LocalBlobStore:
    """Blobs in a directory; the service itself serves the presigned part and download URLs.

    Layout: ``blobs/ab/cd/<sha256>`` for content, ``staging/<upload>/`` for an upload's
    files being received, each file's names beginning ``<position>.``, made by its first
    part PUT (server/storage/staging.py says what they are).
    """

    def __init__(self, root: Path, signer: UrlSigner) -> None:
        self.root = root.resolve()
        self.signer = signer
        self._blobs = self.root / "blobs"
        self._staging = self.root / "staging"
        private_directory(self._blobs)
        private_directory(self._staging)
        self._digests = StagedDigests()

    # --- staging ---

    def _upload_dir(self, upload_id: str) -> Path:
        _check_upload_id(upload_id)
        return self._staging / upload_id

    def _place(self, staged: StagedFile) -> StagedPlace:
        """Where the file's names are: beside its upload's other files', or, staged by a
        version before, in a directory of its own."""
        upload_dir = self._upload_dir(staged.upload_id)
        own = upload_dir / str(staged.position)
        if own.is_dir():
            return StagedPlace(own)
        return StagedPlace(upload_dir, f"{staged.position}.")

    def stage_file(
        self, upload_id: str, position: int, size: int, part_size: int, content_type: str | None
    ) -> StagedFile:
        # Nothing on disk yet: the file's first part PUT makes its staging area
        # (``_staging_area``), so asking for an upload's URLs costs no file system work (it
        # was most of an upload-url of 8 files: a directory and a file each).
        _check_upload_id(upload_id)
        return StagedFile(upload_id, position, size, part_size)

    def _open_data(self, staged: StagedFile) -> tuple[StagedPlace, int]:
        """Where the file is staged, and its ``data`` open for writing; made first (and the
        upload's directory) unless it is there: the file's bytes land in ``data``, each part
        at its offset (sparse until written); the blob is this file linked, so its mode is
        the blob's. Parts of one file may arrive at once: each may make it, none spoils
        another's bytes (the size only grows)."""
        upload_dir = self._upload_dir(staged.upload_id)
        place = StagedPlace(upload_dir, f"{staged.position}.")
        with contextlib.suppress(FileNotFoundError):
            return place, os.open(place.data, os.O_WRONLY)
        own = StagedPlace(upload_dir / str(staged.position))  # staged by a version before
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return own, os.open(own.data, os.O_WRONLY)
        if own.directory.is_dir():  # made by a version before, which stopped before data
            place = own
        try:
            fd = os.open(place.data, os.O_WRONLY | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the upload's first file: its directory too
            private_directory(upload_dir)
            fd = os.open(place.data, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < staged.size:
                os.ftruncate(fd, staged.size)
        except BaseException:
            os.close(fd)
            raise
        return place, fd

    def part_url(
        self, staged: StagedFile, part_number: int, expires_at: datetime, *, base_url: str
    ) -> str:
        grant = PartGrant(
            staged.upload_id,
            staged.position,
            part_number,
            staged.part_length(part_number),
            staged.part_size,
            int(expires_at.timestamp()),
        )
        return base_url + self.signer.part_path(grant)

    def part_origin(self) -> str | None:
        return None  # the service answers its part URLs (base_url is its own address)

    def list_parts(self, staged: Sequence[StagedFile]) -> list[dict[int, StoredPart]]:
        # One scan of each upload's directory for all its files (completion lists every
        # file of an upload: a scan per file would read the upload's names once per file).
        found: list[dict[int, tuple[int, str]] | None] = [None] * len(staged)
        by_upload: defaultdict[str, list[int]] = defaultdict(list)
        for index, stage in enumerate(staged):
            by_upload[stage.upload_id].append(index)
        for upload_id, indexes in by_upload.items():
            upload_dir = self._upload_dir(upload_id)
            names: defaultdict[int, list[tuple[str, os.DirEntry[str]]]] = defaultdict(list)
            own: set[int] = set()
            try:
                with locked(upload_dir, fcntl.LOCK_SH):
                    for entry in os.scandir(upload_dir):
                        position, dot, name = _position_of(entry.name)
                        if position is None:
                            continue
                        if dot:
                            names[position].append((name, entry))
                        elif entry.is_dir(follow_symlinks=False):
                            own.add(position)
                    for index in indexes:
                        stage = staged[index]
                        if stage.position not in own:
                            found[index] = recorded_parts(
                                names[stage.position], stage.part_count, stage.part_length
                            )
            except FileNotFoundError:
                pass
            for index in indexes:  # staged by a version before, each under its own lock
                stage = staged[index]
                if found[index] is None and stage.position in own:
                    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                        found[index] = stored_parts(
                            self._place(stage), stage.part_count, stage.part_length
                        )
        return [
            {n: StoredPart(n, *part) for n, part in sorted((parts or {}).items())}
            for parts in found
        ]

    def open_part_writer(
        self, staged: StagedFile, part_number: int, *, length_known: bool
    ) -> PartWriter:
        """A writer for one part. The first send of a part whose length is known up front
        is written straight into the file at its offset; a re-send, or a body of unknown
        length, goes to a file of its own, so a failed send never spoils a part received
        before."""
        # The data file is opened before the claim is taken: a seal that rebuilt the file
        # (seal_file) claimed every part first, so a writer that takes a claim after it
        # cannot hold the rebuilt file, which becomes the blob.
        place, data_fd = self._open_data(staged)
        expected = staged.part_length(part_number)
        try:
            claimed = length_known and take_claim(place, part_number)
        except BaseException:
            os.close(data_fd)
            raise
        if not claimed:
            os.close(data_fd)  # sent before, being sent now, or of unknown length
            return PartWriter(place, part_number, expected)
        claim = place.claim(part_number)
        try:
            digest = self._digests.of(place.data, staged.size, staged.part_size)
            return PartWriter(
                place,
                part_number,
                expected,
                offset=(part_number - 1) * staged.part_size,
                data_fd=data_fd,
                claim=claim,
                transfer=digest.transfer(part_number),
            )
        except BaseException:
            # No writer holds them: the next send of this part may write in place.
            os.close(data_fd)
            claim.unlink(missing_ok=True)
            raise

    def seal_file(
        self,
        staged: StagedFile,
        etags: Mapping[int, str],
        *,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> CommittedBlob:
        place = self._place(staged)
        data_path = place.data
        if not data_path.is_file():  # no part of it was ever received
            raise ValidationError(f"Part 1 with ETag {normalise_etag(etags[1])!r} is not stored")
        separates: dict[int, Path] = {}
        for number in range(1, staged.part_count + 1):
            etag = normalise_etag(etags[number])
            record = _part_record(place, number, etag)
            if record is None:
                raise ValidationError(f"Part {number} with ETag {etag!r} is not stored")
            if record.name.endswith(SEPARATE_SUFFIX):
                sent, expected = record.stat().st_size, staged.part_length(number)
                if sent > expected:
                    raise FileLargerThanDeclared(staged.size - expected + sent)
                separates[number] = record
        if separates:
            # A part sent again: its bytes go over the first send's, in a copy of the file
            # that replaces it. The first send of such a part may still be writing in place
            # (a body that stalled): it writes into the old file, never into this one, which
            # becomes the blob. Every part is claimed first, so no later send writes in place.
            for number in range(1, staged.part_count + 1):
                take_claim(place, number)
            self._digests.forget(data_path)
            rebuilt = place.rebuilt()
            try:
                with (
                    open(data_path, "rb") as source,
                    open(
                        os.open(rebuilt, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb"
                    ) as data,
                ):
                    shutil.copyfileobj(source, data, CHUNK)
                    for number, separate in separates.items():
                        with open(separate, "rb") as part:
                            data.seek((number - 1) * staged.part_size)
                            shutil.copyfileobj(part, data, CHUNK)
                # A first send that failed meanwhile released its claim (PartWriter.abort,
                # under this lock, which keeps a claim once the file is replaced): claimed
                # again before the replacement, so no send writes in place into the blob.
                with locked(place.directory):
                    for number in range(1, staged.part_count + 1):
                        take_claim(place, number)
                    os.replace(rebuilt, data_path)
            finally:
                rebuilt.unlink(missing_ok=True)
        total = data_path.stat().st_size
        if total > staged.size:
            raise FileLargerThanDeclared(total)
        running = self._digests.get(data_path)
        chosen = {n: normalise_etag(etags[n]) for n in range(1, staged.part_count + 1)}
        # The digest taken while the parts arrived holds when it chained exactly these
        # parts (each written in place); otherwise the staged bytes are hashed now.
        sha256 = running.hexdigest(chosen) if running is not None else None
        if sha256 is None:
            digest = hashlib.sha256()
            with open(data_path, "rb") as source:
                _hash_stream(source, digest, heartbeat)
            sha256 = digest.hexdigest()
        return CommittedBlob(sha256, total)

    def place_file(
        self,
        staged: StagedFile,
        blob: CommittedBlob,
        *,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> None:
        # Linked, not moved, so a completion that dies before the database records it can
        # be retried from the staged bytes.
        data_path = self._place(staged).data
        target = self.blob_path(blob.sha256)
        if not target.exists():
            private_directory(target.parent)
            with contextlib.suppress(FileExistsError):
                os.link(data_path, target)

    def discard_staging(self, staged: Sequence[StagedFile]) -> None:
        # One scan of each upload's directory for all its files, as list_parts.
        by_upload: defaultdict[str, set[int]] = defaultdict(set)
        for stage in staged:
            by_upload[stage.upload_id].add(stage.position)
        for upload_id, positions in by_upload.items():
            upload_dir = self._upload_dir(upload_id)
            try:
                entries = list(os.scandir(upload_dir))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if _position_of(entry.name)[0] not in positions:
                    continue
                self._digests.forget(Path(entry.path))
                self._digests.forget(Path(entry.path) / DATA_FILE)  # a version before's
                _remove(entry)
            with contextlib.suppress(OSError):  # other files of the upload may remain
                upload_dir.rmdir()

    # --- blobs ---

    def blob_path(self, sha256: str) -> Path:
        """The file that holds a blob's bytes."""
        if not SHA256_HEX.fullmatch(sha256):
            raise ValidationError(f"Invalid blob id {quoted(sha256)}")
        return self._blobs / sha256[:2] / sha256[2:4] / sha256

    def blob_exists(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def open_blob(self, sha256: str) -> BinaryIO:
        return open(self.blob_path(sha256), "rb")

    def delete_blob(self, sha256: str) -> None:
        self.blob_path(sha256).unlink(missing_ok=True)

    def blob_key(self, sha256: str) -> str:
        return str(self.blob_path(sha256).relative_to(self.root))

    def blob_uri(self, sha256: str) -> str:
        return self.blob_path(sha256).as_uri()

    def download_url(
        self, sha256: str, *, filename: str, expires_at: datetime, base_url: str
    ) -> str:
        path = self.signer.content_path(sha256, filename, int(expires_at.timestamp()))
        return base_url + path

    def check(self, *, write: bool = False) -> None:
        probe = self._staging / f".probe-{secrets.token_hex(4)}"
        try:
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            raise ServiceUnavailable(
                f"cannot write to the blob directory {self._staging.parent} "
                f"({exc.strerror or exc}): fix its permissions or TRACESTORE_BLOB_URL"
            ) from None

    def staged_uploads(self) -> Iterator[str]:
        """Upload ids that have a staging area (for the sweeper's orphan check)."""
        for entry in os.scandir(self._staging):
            if entry.is_dir():
                yield entry.name

    def discard_upload(self, upload_id: str) -> None:
        upload_dir = self._upload_dir(upload_id)
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(upload_dir):
                self._digests.forget(Path(entry.path))
                self._digests.forget(Path(entry.path) / DATA_FILE)  # a version before's
        shutil.rmtree(upload_dir, ignore_errors=True)


def _part_record(place: StagedPlace, number: int, etag: str) -> Path | None:
    """The record of part ``number`` sent as ``etag``, if the staged file holds it: its name
    beside ``data`` (written in place), its re-send's file, or the name of the layout before
    the one before."""
    if not ETAG.fullmatch(etag):
        return None
    for record in (
        place.record(number, etag),
        place.separate(number, etag),
        place.part_dir(number) / etag,
    ):
        if record.is_file():
            return record
    return None


def _position_of(name: str) -> tuple[int | None, str, str]:
    """The position, the separator and the rest of a name in an upload's staging directory
    (``3.data``: 3, ".", "data"; ``3``: a directory of a version before); the position is
    None for a name the service does not make (``03.data``, ``x``, other digits than ASCII)."""
    position, dot, rest = name.partition(".")
    if not (position.isascii() and position.isdigit()) or str(int(position)) != position:
        return None, dot, rest
    return int(position), dot, rest


def _remove(entry: os.DirEntry[str]) -> None:
    """Remove one of a staged file's entries: a name, or a directory (a part's, or a file's
    staged by a version before) with what it holds."""
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


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


def _check_upload_id(upload_id: str) -> None:
    if not UPLOAD_ID.fullmatch(upload_id):
        raise ValidationError(f"Invalid upload id {upload_id!r}")
