"""The embedded store's staging area: where a file's parts land before completion.

Each staged file is a directory ``staging/<upload>/<position>/``, made by the file's first
part PUT, holding ``data`` (the file's bytes, each part at its offset, sparse until
written) and one small directory per part, ``NNNNN/``: a ``claim`` taken by the first send
of the part, which writes in place into ``data``, and the part's record, ``<etag>`` once
that send is whole (both hard links to ``data``: names, not files of their own). A later
send of the same part goes to ``<etag>.part`` of its own (renamed into place when whole),
so a failed send never spoils a part received before.

While parts are written in place, a ``FileDigest`` per staged file hashes them as they
arrive (tracestore/filedigest.py), so completion usually has the file's SHA-256 without
reading the file again. That digest lives in this process only: after a restart, or when
another process received some parts, completion hashes the staged file instead.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

from tracestore.errors import PayloadTooLarge, ValidationError, quoted
from tracestore.filedigest import FileDigest, PartTransfer, ReadBack

DATA_FILE = "data"
CLAIM_FILE = "claim"


def take_claim(part_dir: Path) -> bool:
    """Take the part's claim (the right to write its first send in place); False when it
    was taken before. The claim is a hard link to the staged file's ``data``: a name made
    atomically, like an exclusive create, but without a new inode (a file's inode cost a
    millisecond of the kernel's time on a VM's ext4, as much as writing a MiB)."""
    try:
        os.link(part_dir.parent / DATA_FILE, part_dir / CLAIM_FILE)
    except FileExistsError:
        return False
    return True


SEPARATE_SUFFIX = ".part"
ETAG = re.compile(r"[0-9a-f]{32}")
READ_BACK_CHUNK = 4 * 1024 * 1024


class StagedDigests:
    """The running digests of the files being received, by staged directory; the least
    recently used are forgotten beyond ``limit`` (their completion hashes the file)."""

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._digests: OrderedDict[Path, FileDigest] = OrderedDict()

    def of(self, directory: Path, size: int, part_size: int) -> FileDigest:
        with self._lock:
            digest = self._digests.get(directory)
            if digest is None:
                digest = FileDigest(size, part_size, _reader(directory / DATA_FILE))
                self._digests[directory] = digest
                while len(self._digests) > self._limit:
                    self._digests.popitem(last=False)
            else:
                self._digests.move_to_end(directory)
            return digest

    def get(self, directory: Path) -> FileDigest | None:
        with self._lock:
            return self._digests.get(directory)

    def forget(self, directory: Path) -> None:
        with self._lock:
            self._digests.pop(directory, None)


def _reader(path: Path) -> ReadBack:
    def read_back(offset: int, length: int) -> Iterator[memoryview]:
        buffer = memoryview(bytearray(min(READ_BACK_CHUNK, max(length, 1))))
        fd = os.open(path, os.O_RDONLY)
        try:
            end = offset + length
            while offset < end:
                n = os.preadv(fd, [buffer[: min(len(buffer), end - offset)]], offset)
                if n <= 0:
                    raise OSError(f"{path} ended at {offset} bytes")
                offset += n
                yield buffer[:n]
        finally:
            os.close(fd)

    return read_back


def stored_part(part_dir: Path, number: int, length: int) -> tuple[int, str] | None:
    """The part recorded in ``part_dir`` as (size, etag): an ``<etag>`` entry for bytes
    written in place, or ``<etag>.part`` holding a re-send's bytes; the newest if
    there are two."""
    newest: tuple[int, tuple[int, str]] | None = None
    for entry in os.scandir(part_dir):
        etag, _, suffix = entry.name.partition(".")
        if not ETAG.fullmatch(etag) or suffix not in ("", SEPARATE_SUFFIX[1:]):
            continue
        stat = entry.stat()
        part = (stat.st_size if suffix else length, etag)
        if newest is None or stat.st_mtime_ns >= newest[0]:
            newest = (stat.st_mtime_ns, part)
    return newest[1] if newest else None


class PartWriter:
    """Receives one part into its directory. In place (``offset``, the staged file's
    ``data_fd`` and the part's ``claim`` given; the writer closes the handle): bytes go
    straight into the staged file, are hashed into the file's running digest when given
    one, and an ``<etag>`` entry records the part once complete. Otherwise bytes go to a
    temporary file renamed to ``<etag>.part`` once complete."""

    def __init__(
        self,
        part_dir: Path,
        part_number: int,
        expected_size: int,
        *,
        offset: int | None = None,
        data_fd: int | None = None,
        claim: Path | None = None,
        transfer: PartTransfer | None = None,
    ) -> None:
        self.part_dir = part_dir
        self.part_number = part_number
        self.expected_size = expected_size
        self.received = 0
        self._checksum = hashlib.sha256()
        self._offset = offset
        self._claim = claim
        self._transfer = transfer
        if offset is None:
            self._tmp: Path | None = part_dir / f"tmp{secrets.token_hex(6)}"
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        elif data_fd is None or claim is None:
            raise ValueError("Writing in place takes the staged file's handle and its claim")
        else:
            self._tmp = None
            self._fd = data_fd  # opened before the claim was taken (open_part_writer)

    def write(self, chunks: Sequence[bytes | memoryview], *, checksum: bool) -> None:
        """Write ``chunks`` (in order) after the bytes received so far."""
        size = sum(len(c) for c in chunks)
        if self.received + size > self.expected_size:
            raise PayloadTooLarge(
                f"Part {self.part_number} is larger than its declared size of "
                f"{self.expected_size} bytes"
            )
        if checksum:
            for chunk in chunks:
                self._checksum.update(chunk)
        views = [memoryview(c) for c in chunks if c]
        while views:
            if self._offset is None:
                written = os.writev(self._fd, views)
            else:
                written = os.pwritev(self._fd, views, self._offset + self.received)
            self.received += written
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if views:
                views[0] = views[0][written:]
        if self._transfer is not None:
            # After writing: a transfer that takes its turn now reads back what came before.
            for chunk in chunks:
                self._transfer.update(chunk)

    def finish(self, checksum_b64: str | None) -> str:
        """Check size (and checksum when given), then record the part; its ETag."""
        if self.received != self.expected_size:
            raise ValidationError(
                f"Part {self.part_number} has {self.received} bytes; expected {self.expected_size}"
            )
        if checksum_b64 is not None:
            actual = base64.b64encode(self._checksum.digest()).decode()
            given = checksum_b64.strip()
            # compare_digest refuses non-ASCII text (TypeError): such a header never matches.
            if not given.isascii() or not hmac.compare_digest(actual, given):
                raise ValidationError(
                    f"Part {self.part_number}: x-amz-checksum-sha256 {quoted(given)} "
                    f"does not match the received bytes ({actual})"
                )
        os.close(self._fd)
        etag = secrets.token_hex(16)
        # Two sends of one part may finish at once (in this process or another): each
        # records itself and removes the records before it under the part directory's
        # lock, or each could remove the other's and leave the part with none.
        lock = os.open(self.part_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self._tmp is None:
                final = self.part_dir / etag
                os.link(self.part_dir / CLAIM_FILE, final)  # a name only, like the claim
            else:
                final = self.part_dir / f"{etag}{SEPARATE_SUFFIX}"
                os.replace(self._tmp, final)
            for entry in os.scandir(self.part_dir):
                stale = entry.name.partition(".")[0]
                if entry.path != str(final) and ETAG.fullmatch(stale):
                    os.unlink(entry.path)
        finally:
            os.close(lock)  # releases the lock
        self._claim = None  # the claim stays: later sends of this part are re-sends
        if self._transfer is not None:
            self._transfer.finish(etag)
        return etag

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self._transfer is not None:
            self._transfer.abort()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        if self._claim is not None:
            # A failed first send: the next send of this part may write in place again.
            self._claim.unlink(missing_ok=True)
            self._claim = None
