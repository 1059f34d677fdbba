"""Byte streams for the inspectors: peeking at the head, unwrapping gzip, zstd, bzip2 and xz,
and the budget of decompressed bytes one stored file may cost.

Every inspector reads through ``read_up_to`` in bounded pieces, so memory never depends on
the size of a file, and every decompressor is asked for at most the piece wanted (never
"all this input's output": a few bytes of bzip2 unpack to gigabytes). What a file's
decompressors produce in all (its archive members', nested ones' too) is drawn from one
``Budget``, so the work a small file can cause is bounded by its stored size (``Limits``):
past it the read fails with the reason, and the scanners keep what they read before.
A zstd stream that ends inside a frame is reported as truncated (the ``zstandard`` reader
itself just stops), by walking the frame and block headers of the compressed bytes as they
pass by.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol, cast

import zstandard

from tracestore.inspect.model import Compression, InspectionError

HEAD_SIZE = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ\x00"
# "BZh", the block size digit, then a block's magic (pi) or the end of an empty stream (sqrt pi).
_BZIP2_BLOCKS = (b"1AY&SY", b"\x17rE8P\x90")

MIB = 1024 * 1024
# Decompressed bytes one stored file may produce (its members' and nested files' included):
# at most MAX_UNPACKED, and at most MAX_EXPANSION times its stored size plus UNPACKED_ALLOWANCE.
# Real Kineto traces compress 17-26 times (gzip -9, zstd -19, xz, bzip2).
MAX_UNPACKED = 16 * 1024 * MIB
MAX_EXPANSION = 100
UNPACKED_ALLOWANCE = MIB
MAX_MEMBERS = 10_000  # archive members inspected per archive


@dataclass(frozen=True)
class Limits:
    """What inspecting one stored file may cost: ``unpacked`` decompressed bytes at most,
    and at most ``expansion`` times its stored size (plus ``UNPACKED_ALLOWANCE``);
    ``members`` archive members inspected per archive (the rest are counted, not read)."""

    unpacked: int = MAX_UNPACKED
    expansion: int = MAX_EXPANSION
    members: int = MAX_MEMBERS

    def budget(self, stored_size: int | None) -> Budget:
        """The budget of a file of ``stored_size`` bytes (None: unknown, the absolute cap)."""
        if stored_size is None:
            return Budget(self.unpacked, f"at most {self.unpacked:,} per file")
        relative = self.expansion * stored_size + UNPACKED_ALLOWANCE
        if relative >= self.unpacked:
            return Budget(self.unpacked, f"at most {self.unpacked:,} per file")
        return Budget(
            relative, f"{self.expansion} times its {stored_size:,} stored bytes, plus 1 MiB"
        )


DEFAULT_LIMITS = Limits()


class Budget:
    """The decompressed bytes a stored file has left; ``spend`` raises once they are out."""

    def __init__(self, limit: int, rule: str) -> None:
        self.limit = limit
        self.left = limit
        self.rule = rule

    def exceeded(self) -> InspectionError:
        """The error a read past the budget raises: what was read, and the limit's rule."""
        return InspectionError(
            f"inspection stopped after {self.limit:,} decompressed bytes, the limit for this "
            f"file ({self.rule})"
        )


class Budgeted:
    """A decompressor's output drawn from ``budget``: a read past it raises (once the bytes
    before it were handed out), so a bomb is read only as far as its stored size allows."""

    def __init__(self, stream: BinaryReader, budget: Budget) -> None:
        self._stream = stream
        self._budget = budget
        self._inner_read1 = getattr(stream, "read1", None)

    def read(self, size: int = -1, /) -> bytes:
        return self._drawn(self._stream.read, size)

    def read1(self, size: int = -1, /) -> bytes:
        return self._drawn(self._inner_read1 or self._stream.read, size)

    def _drawn(self, read: Callable[[int], bytes], size: int) -> bytes:
        budget = self._budget
        if budget.left <= 0:
            if size != 0 and read(1):  # more than the budget: not merely its exact end
                raise budget.exceeded()
            return b""
        wanted = budget.left if size < 0 else min(size, budget.left)
        data = read(wanted)
        budget.left -= len(data)
        return data

    def close(self) -> None:
        self._stream.close()


class BinaryReader(Protocol):
    """The least a file object must offer: ``read(size)`` returning bytes, and ``close()``."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


def read_up_to(stream: BinaryReader, size: int) -> bytes:
    """Read ``size`` bytes, fewer only at the end of the stream (decompressors return short).

    When the stream breaks after some bytes were read, raises ``PartialRead`` carrying them.
    """
    data = stream.read(size)
    if len(data) >= size or not data:
        return data
    parts = [data]
    got = len(data)
    try:
        while got < size:
            more = stream.read(size - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
    except Exception as exc:
        raise PartialRead(b"".join(parts), exc) from exc
    return b"".join(parts)


class PartialRead(Exception):
    """A read that broke off: ``data`` is what arrived before ``cause`` was raised."""

    def __init__(self, data: bytes, cause: Exception) -> None:
        super().__init__(str(cause))
        self.data = data
        self.cause = cause


def read_chunk(stream: BinaryReader, size: int) -> tuple[bytes, Exception | None]:
    """``read_up_to``, returning ``(bytes that arrived, error that ended the stream or None)``.

    Scanners process the bytes first and raise the error after, so a truncated compressed
    file still reports what its intact part holds.
    """
    try:
        return read_up_to(stream, size), None
    except PartialRead as partial:
        return partial.data, partial.cause


def is_seekable(stream: BinaryReader) -> bool:
    """True when the stream can seek (some file objects lack the method or raise)."""
    try:
        return bool(stream.seekable())  # type: ignore[attr-defined]
    except Exception:
        return False


class PrefixedReader:
    """A stream whose first bytes were already read: serves them again, then the rest."""

    def __init__(self, head: bytes, rest: BinaryReader) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all remaining bytes when negative)."""
        if self._head:
            if size < 0:
                data, self._head = self._head + self._rest.read(), b""
                return data
            data, self._head = self._head[:size], self._head[size:]
            return data
        return self._rest.read(size)

    def close(self) -> None:
        """Close the underlying stream."""
        self._rest.close()


def tell(stream: BinaryReader) -> int | None:
    """The position of a seekable stream, else None."""
    return cast(IO[bytes], stream).tell() if is_seekable(stream) else None


def rewound(stream: BinaryReader, head: bytes, origin: int | None) -> BinaryReader:
    """The stream from where ``head`` was read again: a seek back to ``origin`` if it was
    seekable, else the ``head`` served before the rest."""
    if origin is not None:
        cast(IO[bytes], stream).seek(origin)
        return stream
    return PrefixedReader(head, stream)


def detect_compression(head: bytes) -> Compression | None:
    """``gzip``, ``zstd``, ``bzip2`` or ``xz`` from the magic bytes, else None."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in _BZIP2_BLOCKS:
        return "bzip2"
    return None


def decompressed(stream: BinaryReader, compression: Compression, budget: Budget) -> BinaryReader:
    """A reader of the decompressed bytes of ``stream`` (which starts at its first byte),
    drawn from ``budget``. Each of these readers asks its decompressor for at most the
    bytes wanted (``max_length``), however much the input would unpack to."""
    source = cast(IO[bytes], stream)
    reader: BinaryReader
    if compression == "gzip":
        reader = cast(BinaryReader, gzip.GzipFile(fileobj=source, mode="rb"))
    elif compression == "zstd":
        reader = _ZstdReader(stream)
    elif compression == "bzip2":
        reader = cast(BinaryReader, bz2.BZ2File(source, mode="rb"))
    else:
        reader = cast(BinaryReader, lzma.LZMAFile(source, mode="rb"))  # noqa: SIM115
    return _Salvaging(Budgeted(reader, budget))


class _Salvaging:
    """Reads a decompressor piece by piece and, when it breaks, first hands out what it got.

    A decompressor that hits a cut-off stream raises and drops the output of that call;
    reading with ``read1`` (one input buffer's worth at a time) and deferring the error
    keeps the scanners' view of the intact part, so a truncated ``.json.gz`` still reports
    the rank at its head.
    """

    def __init__(self, stream: BinaryReader) -> None:
        self._stream = stream
        self._read1 = cast(Callable[[int], bytes], getattr(stream, "read1", stream.read))
        self._error: Exception | None = None

    def read(self, size: int = -1, /) -> bytes:
        if self._error is not None:
            raise self._error
        parts: list[bytes] = []
        got = 0
        while size < 0 or got < size:
            try:
                piece = self._read1(256 * 1024 if size < 0 else size - got)
            except Exception as exc:
                if not parts:
                    raise
                self._error = exc
                break
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)

    def close(self) -> None:
        self._stream.close()


class Failing:
    """A stream that raises ``error`` when read: the rest of a stream that broke off."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def read(self, size: int = -1, /) -> bytes:
        raise self._error

    def close(self) -> None:
        """Nothing to close."""


class _ZstdReader:
    """zstd decompression that raises on a stream ending inside a frame."""

    def __init__(self, stream: BinaryReader) -> None:
        self._walker = _ZstdFrameWalker(stream)
        reader = zstandard.ZstdDecompressor().stream_reader(
            cast(IO[bytes], self._walker), read_across_frames=True
        )
        self._reader = cast(BinaryReader, reader)

    def read(self, size: int = -1, /) -> bytes:
        return self._checked(self._reader.read(size), size)

    def read1(self, size: int = -1, /) -> bytes:
        return self._checked(cast(Any, self._reader).read1(size), size)

    def _checked(self, data: bytes, size: int) -> bytes:
        if not data and size != 0 and not self._walker.at_frame_boundary():
            raise InspectionError("truncated: the zstd stream ends inside a frame")
        return data

    def close(self) -> None:
        self._reader.close()
        self._walker.close()


class _ZstdFrameWalker:
    """Passes compressed bytes through while following zstd frame and block headers."""

    def __init__(self, stream: BinaryReader) -> None:
        self._stream = stream
        self._pending = bytearray()  # bytes not yet attributed to a header or a skip
        self._skip = 0  # content bytes still to pass before the next header
        self._state = "frame"  # "frame": a frame header is next; "block": a block header
        self._checksum = False
        self._eof = False

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        if not data:
            self._eof = True
        else:
            self._follow(data)
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._stream.close()

    def at_frame_boundary(self) -> bool:
        return self._eof and self._state == "frame" and self._skip == 0 and not self._pending

    def _follow(self, data: bytes) -> None:
        view = memoryview(data)
        if self._skip:
            taken = min(self._skip, len(view))
            self._skip -= taken
            view = view[taken:]
        self._pending += view
        while not self._skip and self._pending:
            used = self._frame_header() if self._state == "frame" else self._block_header()
            if used == 0:
                return
            del self._pending[:used]
            if self._skip and self._pending:
                taken = min(self._skip, len(self._pending))
                self._skip -= taken
                del self._pending[:taken]

    def _frame_header(self) -> int:
        buf = self._pending
        if len(buf) < 8:
            return 0
        magic = int.from_bytes(buf[:4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            self._skip = int.from_bytes(buf[4:8], "little")
            return 8
        if bytes(buf[:4]) != ZSTD_MAGIC:
            raise InspectionError("malformed zstd stream: bad frame magic")
        descriptor = buf[4]
        fcs_flag = descriptor >> 6
        single_segment = descriptor >> 5 & 1
        self._checksum = bool(descriptor >> 2 & 1)
        did_size = (0, 1, 2, 4)[descriptor & 3]
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        size = 5 + (0 if single_segment else 1) + did_size + fcs_size
        if len(buf) < size:
            return 0
        self._state = "block"
        return size

    def _block_header(self) -> int:
        buf = self._pending
        if len(buf) < 3:
            return 0
        header = int.from_bytes(buf[:3], "little")
        last, kind, size = header & 1, header >> 1 & 3, header >> 3
        if kind == 3:
            raise InspectionError("malformed zstd stream: reserved block type")
        self._skip = 1 if kind == 1 else size
        if last:
            self._skip += 4 if self._checksum else 0
            self._state = "frame"
        return 3
