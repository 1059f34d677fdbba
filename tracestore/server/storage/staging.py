"""The embedded store's staging area: where a file's parts land before completion.

An upload's files are staged in its directory, ``staging/<upload>/``, as names that begin
with the file's position (``P.``), made by the file's first part PUT: ``P.data`` (the
file's bytes, each part at its offset, sparse until written) and, per part, ``P.NNNNN.claim``,
taken by the first send of the part, which writes in place into ``P.data``, and
``P.NNNNN.<etag>``, the part's record once that send is whole (both hard links to
``P.data``: names, not files of their own). A later send of the same part goes to
``P.NNNNN/<etag>.part``, a file of its own in the part's directory (made by the first
re-send; renamed into place when whole), so a failed send never spoils a part received
before. Each file of an upload of many small ones therefore costs one new inode, its
``data``: on a VM's ext4 without a journal an inode cost the kernel up to a millisecond, as
much as writing a MiB, and each one removed made the next ones dearer for minutes.

Staging written by the versions before is read as it is (a ``StagedPlace`` says which):
a directory per file, ``<position>/`` holding the same names without the prefix, and,
before that, a directory per part as well (``NNNNN/claim``, ``NNNNN/<etag>``).

The directory that holds a file's names is the lock for them (``locked``): an upload's
directory for the files of this layout.

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracestore.errors import Conflict, PayloadTooLarge, ValidationError, quoted
from tracestore.filedigest import FileDigest, PartTransfer, ReadBack

DATA_FILE = "data"
CLAIM_FILE = "claim"


def part_key(number: int) -> str:
    """The part's key in its names, and its directory's name: ``00001`` for part 1."""
    return f"{number:05d}"


@dataclass(frozen=True)
class StagedPlace:
    """Where one staged file's names are: in ``directory``, each beginning with ``prefix``.
    A file staged by this version: the upload's directory, prefix ``<position>.``; one
    staged by a version before: a directory of its own, ``<position>/``, no prefix."""

    directory: Path
    prefix: str = ""

    @property
    def data(self) -> Path:
        """The staged file's bytes: ``P.data``."""
        return self.directory / f"{self.prefix}{DATA_FILE}"

    def claim(self, number: int) -> Path:
        """Part ``number``'s claim: ``P.NNNNN.claim``."""
        return self.directory / f"{self.prefix}{part_key(number)}.{CLAIM_FILE}"

    def record(self, number: int, etag: str) -> Path:
        """The record of part ``number`` written in place as ``etag``: ``P.NNNNN.<etag>``."""
        return self.directory / f"{self.prefix}{part_key(number)}.{etag}"

    def part_dir(self, number: int) -> Path:
        """Part ``number``'s directory, made by its first re-send: ``P.NNNNN/``."""
        return self.directory / f"{self.prefix}{part_key(number)}"

    def separate(self, number: int, etag: str) -> Path:
        """A re-send of part ``number`` recorded as ``etag``: ``P.NNNNN/<etag>.part``."""
        return self.part_dir(number) / f"{etag}{SEPARATE_SUFFIX}"

    def rebuilt(self) -> Path:
        """A new name for the copy of ``data`` a seal assembles (a part sent again)."""
        return self.directory / f"{self.prefix}{DATA_FILE}.{secrets.token_hex(6)}"

    def names(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """The file's entries, each with its name after the prefix."""
        for entry in os.scandir(self.directory):
            if entry.name.startswith(self.prefix):
                yield entry.name[len(self.prefix) :], entry


def take_claim(place: StagedPlace, number: int) -> bool:
    """Take part ``number``'s claim (the right to write its first send in place); False when
    it was taken before. The claim is a hard link to the staged file's ``data``: a name made
    atomically, like an exclusive create, but without a new inode."""
    try:
        os.link(place.data, place.claim(number))
    except FileExistsError:
        return False
    # Staging of the layout before the one before: the part's claim was in its directory.
    return not os.path.lexists(place.part_dir(number) / CLAIM_FILE)


SEPARATE_SUFFIX = ".part"
_KEY_LENGTH = len(part_key(1))
ETAG = re.compile(r"[0-9a-f]{32}")
READ_BACK_CHUNK = 4 * 1024 * 1024


class StagedDigests:
    """The running digests of the files being received, by staged ``data`` path; the least
    recently used are forgotten beyond ``limit`` (their completion hashes the file)."""

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._digests: OrderedDict[Path, FileDigest] = OrderedDict()

    def of(self, data: Path, size: int, part_size: int) -> FileDigest:
        with self._lock:
            digest = self._digests.get(data)
            if digest is None:
                digest = FileDigest(size, part_size, _reader(data))
                self._digests[data] = digest
                while len(self._digests) > self._limit:
                    self._digests.popitem(last=False)
            else:
                self._digests.move_to_end(data)
            return digest

    def get(self, data: Path) -> FileDigest | None:
        with self._lock:
            return self._digests.get(data)

    def forget(self, data: Path) -> None:
        with self._lock:
            self._digests.pop(data, None)


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


def stored_parts(
    place: StagedPlace, part_count: int, part_length: Callable[[int], int]
) -> dict[int, tuple[int, str]]:
    """The parts recorded for the file staged at ``place``, as (size, etag), read under its
    lock (``recorded_parts`` says which)."""
    # Under the lock a finish records itself with (shared: listings do not wait on each
    # other), so no finish is half done: a record it replaces is not gone under the scan.
    with locked(place.directory, fcntl.LOCK_SH):
        return recorded_parts(place.names(), part_count, part_length)


def recorded_parts(
    names: Iterable[tuple[str, os.DirEntry[str]]],
    part_count: int,
    part_length: Callable[[int], int],
) -> dict[int, tuple[int, str]]:
    """The parts a staged file's ``names`` (each after the file's prefix, with its entry;
    read under the file's lock) record, as (size, etag): ``NNNNN.<etag>`` for bytes written
    in place (the part's length), ``NNNNN/<etag>.part`` holding a re-send's bytes (its own
    size), or, staged by the layout before the one before, ``NNNNN/<etag>`` written in
    place; the newest if a part has two."""
    found: dict[int, tuple[int, tuple[int, str]]] = {}

    def consider(number: int, etag: str, entry: os.DirEntry[str], separate: bool) -> None:
        if not 1 <= number <= part_count:
            return
        stat = entry.stat()
        if number not in found or stat.st_mtime_ns >= found[number][0]:
            size = stat.st_size if separate else part_length(number)
            found[number] = (stat.st_mtime_ns, (size, etag))

    for name, entry in names:
        key, _, etag = name.partition(".")
        if len(key) != _KEY_LENGTH or not key.isdigit():
            continue
        if ETAG.fullmatch(etag):
            consider(int(key), etag, entry, False)
        elif not etag and entry.is_dir(follow_symlinks=False):
            for inner in os.scandir(entry.path):
                inner_name, _, suffix = inner.name.partition(".")
                if ETAG.fullmatch(inner_name) and suffix in ("", SEPARATE_SUFFIX[1:]):
                    consider(int(key), inner_name, inner, bool(suffix))
    return {number: part for number, (_, part) in found.items()}


@contextlib.contextmanager
def locked(directory: Path, operation: int = fcntl.LOCK_EX) -> Iterator[None]:
    """``flock`` of the directory that holds a staged file's names while the block runs:
    what records a part, releases a claim or replaces ``data`` holds it exclusively.
    FileNotFoundError when the staging is gone."""
    lock = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, operation)
        yield
    finally:
        os.close(lock)  # releases the lock


class PartWriter:
    """Receives one part of the file staged at ``place``. In place (``offset``, the staged
    file's ``data_fd`` and the part's ``claim`` given; the writer closes the handle): bytes
    go straight into the staged file, are hashed into the file's running digest when given
    one, and a ``P.NNNNN.<etag>`` name records the part once complete. Otherwise bytes go to
    a temporary file in the part's directory, renamed to ``<etag>.part`` once complete."""

    def __init__(
        self,
        place: StagedPlace,
        part_number: int,
        expected_size: int,
        *,
        offset: int | None = None,
        data_fd: int | None = None,
        claim: Path | None = None,
        transfer: PartTransfer | None = None,
    ) -> None:
        self.place = place
        self.part_number = part_number
        self.expected_size = expected_size
        self.received = 0
        self._checksum = hashlib.sha256()
        self._offset = offset
        self._claim = claim
        self._transfer = transfer
        if offset is None:
            part_dir = place.part_dir(part_number)
            part_dir.mkdir(mode=0o700, exist_ok=True)
            self._tmp: Path | None = part_dir / f"tmp{secrets.token_hex(6)}"
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        elif data_fd is None or claim is None:
            raise ValueError("Writing in place takes the staged file's handle and its claim")
        else:
            self._tmp = None
            self._fd = data_fd  # opened before the claim was taken (open_part_writer)
        # The staged file written into: a seal that took a re-sent part replaced it.
        self._inode = os.fstat(self._fd).st_ino if self._tmp is None else None

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
        fd, self._fd = self._fd, -1  # closed once: abort must not close a reused number
        os.close(fd)
        etag = secrets.token_hex(16)
        # Two sends of one part may finish at once (in this process or another): each
        # records itself and removes the records before it under the lock of the directory
        # that holds the file's names, or each could remove the other's and leave the part
        # with none.
        try:
            with locked(self.place.directory):
                self._record(etag)
        except FileNotFoundError:  # the upload's directory, the part's claim or the file
            raise Conflict(
                f"Part {self.part_number} arrived after its upload was completed or "
                "abandoned; its bytes were not kept"
            ) from None
        self._claim = None  # the claim stays: later sends of this part are re-sends
        if self._transfer is not None:
            self._transfer.finish(etag)
        return etag

    def _record(self, etag: str) -> None:
        """Record this send as the part's ``etag`` and remove the records before it (under
        the lock of the directory that holds the file's names)."""
        key = part_key(self.part_number)
        part_dir = self.place.part_dir(self.part_number)
        if self._tmp is None:
            if not self._writes_staged_file():
                raise Conflict(
                    f"Part {self.part_number} was written into a copy of its file that "
                    "completion replaced (the part was sent again meanwhile); its bytes "
                    "were not kept"
                )
            final = self.place.record(self.part_number, etag)
            os.link(self.place.claim(self.part_number), final)  # a name, as the claim
        else:
            final = self.place.separate(self.part_number, etag)
            os.replace(self._tmp, final)
            # The first send's record: a name beside the others (rarely sent again, so
            # this scan of the upload's names is rare too).
            for name, entry in self.place.names():
                stale_key, _, stale = name.partition(".")
                if stale_key == key and ETAG.fullmatch(stale):
                    with contextlib.suppress(FileNotFoundError):  # a discard's
                        os.unlink(entry.path)
        # Re-sends' records, and the layout before's, are in the part's directory.
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(part_dir):
                stale = entry.name.partition(".")[0]
                if entry.path != str(final) and ETAG.fullmatch(stale):
                    os.unlink(entry.path)

    def _writes_staged_file(self) -> bool:
        """Whether ``data`` is still the file this writer writes in place (under the lock);
        FileNotFoundError when it is gone (the upload completed or was abandoned)."""
        return os.stat(self.place.data).st_ino == self._inode

    def abort(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._transfer is not None:
            self._transfer.abort()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        if self._claim is not None:
            claim, self._claim = self._claim, None
            # A failed first send: the next send of this part may write in place again,
            # unless a seal replaced the file meanwhile (the claim it keeps stops any send
            # from writing in place into the blob-to-be). Under the lock, so the check and
            # the seal's replacement cannot interleave.
            with contextlib.suppress(FileNotFoundError), locked(self.place.directory):
                if self._writes_staged_file():
                    claim.unlink(missing_ok=True)
