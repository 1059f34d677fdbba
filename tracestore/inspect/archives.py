"""ZIP and tar archives of traces: each member inspected in place, nothing written to disk.

ZIP needs random access (its directory is at the end), so it needs a seekable file object;
tar is read as a stream, member after member, so it works on anything readable (including
the output of a decompressor: ``.tar.gz``, ``.tar.zst``, ``.tar.bz2``, ``.tar.xz``). The
AppleDouble files macOS adds to archives it makes are skipped.

Both are read in bounded memory however the bytes look. ZIP's central directory is walked
entry by entry (``zipfile`` loads all of it, an object per entry, before the first member),
and every member's decompressor (deflate, bzip2, LZMA) is asked for at most the bytes wanted
(``zipfile`` unpacks a bzip2 or LZMA member's input whole: 2 KiB of bzip2 is 2 GiB of
spaces), its output drawn from the file's ``Budget``. A tar's extended headers (long names,
pax records), which ``tarfile`` reads whole, are refused past ``MAX_EXTENDED_HEADER``. Past
``max_members`` members an archive's members are counted, not inspected, and it says so.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

from tracestore.inspect.model import Draft, FileInspection, InspectionError
from tracestore.inspect.streams import (
    DEFAULT_LIMITS,
    MAX_MEMBERS,
    BinaryReader,
    Budget,
    Budgeted,
    Limits,
    read_up_to,
)

Opener = Callable[[], BinaryReader]
InspectMember = Callable[[Opener, str], FileInspection]

MAX_EXTENDED_HEADER = 1024 * 1024  # a tar pax record or GNU long name, read whole
_CHUNK = 256 * 1024
_END_RECORD = struct.Struct("<4s4H2LH")  # end of central directory
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_STORED, _DEFLATED, _BZIP2, _LZMA = 0, 8, 12, 14
_EXTENDED = (
    *(tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE),
    *(tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK),
)
_METHODS = {_STORED: "stored", _DEFLATED: "deflate", _BZIP2: "bzip2", _LZMA: "LZMA"}


def is_resource_fork(name: str) -> bool:
    """macOS AppleDouble files (``._name``, ``__MACOSX/...``): metadata, never a trace."""
    return name.rsplit("/", 1)[-1].startswith("._") or name.startswith("__MACOSX/")


def _too_many(inspected: int, skipped: int) -> InspectionError:
    return InspectionError(
        f"inspected the first {inspected:,} members; {skipped:,} more were skipped (the limit "
        "of members inspected per archive)"
    )


def scan_zip(
    stream: BinaryReader,
    draft: Draft,
    inspect_member: InspectMember,
    *,
    seekable: bool,
    limits: Limits = DEFAULT_LIMITS,
    budget: Budget | None = None,
) -> None:
    """Inspect the file members of a ZIP archive (the first ``limits.members``)."""
    if not seekable:
        raise InspectionError(
            "a ZIP archive needs random access: it cannot be read from a compressed or "
            "streamed source"
        )
    source = cast(IO[bytes], stream)
    spend = budget or limits.budget(None)
    inspected = skipped = 0
    for entry in _ZipDirectory(source).entries():
        if entry.name.endswith("/") or is_resource_fork(entry.name):
            continue
        if inspected >= limits.members:
            skipped += 1
            continue
        inspected += 1

        def opener(entry: _ZipEntry = entry) -> BinaryReader:
            return _ZipMember(source, entry, spend)

        member = inspect_member(opener, entry.name)
        draft.members.append(member)
        draft.bytes_scanned += member.bytes_scanned
    if skipped:
        raise _too_many(inspected, skipped)


def scan_tar(
    stream: BinaryReader,
    draft: Draft,
    inspect_member: InspectMember,
    *,
    max_members: int = MAX_MEMBERS,
) -> None:
    """Inspect the regular files of a tar stream, in order (the first ``max_members``)."""
    inspected = skipped = 0
    with tarfile.open(
        fileobj=cast(IO[bytes], stream), mode="r|", tarinfo=_BoundedTarInfo
    ) as archive:
        while (info := archive.next()) is not None:
            # A stream-mode TarFile keeps every header it has read; members are not
            # revisited here, so dropping them keeps memory flat on huge archives.
            archive.members.clear()  # type: ignore[attr-defined]
            if not info.isfile() or is_resource_fork(info.name):
                continue
            if inspected >= max_members:
                skipped += 1  # counted by its header; tarfile skips its bytes
                continue
            member_file = archive.extractfile(info)
            if member_file is None:
                continue
            inspected += 1

            def opener(member_file: IO[bytes] = member_file) -> BinaryReader:
                return member_file

            member = inspect_member(opener, info.name)
            draft.members.append(member)
            draft.bytes_scanned += member.bytes_scanned
    if skipped:
        raise _too_many(inspected, skipped)


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose extended records (read whole by ``tarfile``) must be small."""

    def _proc_member(self, archive: Any) -> Any:
        if self.type in _EXTENDED and self.size > MAX_EXTENDED_HEADER:
            raise InspectionError(
                f"malformed tar archive: an extended header (long name or pax record) of "
                f"{self.size:,} bytes, over the {MAX_EXTENDED_HEADER:,} read"
            )
        return super()._proc_member(archive)  # type: ignore[misc]


@dataclass(frozen=True)
class _ZipEntry:
    """One entry of a ZIP's central directory: what reading its member takes."""

    name: str
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    offset: int  # of its local header, from the start of the archive's data


class _ZipDirectory:
    """The end record and the central directory of a ZIP, read an entry at a time."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        end = source.seek(0, 2)
        tail_size = min(end, _END_RECORD.size + 0xFFFF + _ZIP64_LOCATOR.size)
        source.seek(end - tail_size)
        tail = read_up_to(cast(BinaryReader, source), tail_size)
        at = tail.rfind(b"PK\x05\x06")
        while at >= 0 and at + _END_RECORD.size > len(tail):
            at = tail.rfind(b"PK\x05\x06", 0, at)
        if at < 0:
            raise InspectionError(
                "malformed or truncated ZIP archive: no end of central directory record"
            )
        fields = _END_RECORD.unpack_from(tail, at)
        self.count, size, offset = fields[4], fields[5], fields[6]
        record_at = end - tail_size + at
        locator = at - _ZIP64_LOCATOR.size
        if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":
            zip64_at = _ZIP64_LOCATOR.unpack_from(tail, locator)[2]
            source.seek(zip64_at)
            record = read_up_to(cast(BinaryReader, source), _ZIP64_END.size)
            if len(record) < _ZIP64_END.size or record[:4] != b"PK\x06\x06":
                raise InspectionError("malformed ZIP archive: a bad zip64 end record")
            self.count, size, offset = _ZIP64_END.unpack(record)[7:10]
            record_at -= _ZIP64_END.size + _ZIP64_LOCATOR.size
        # Data before the archive (a self-extractor's): every offset is shifted by it.
        self._shift = record_at - size - offset
        if self._shift < 0:
            raise InspectionError("malformed ZIP archive: the central directory lies outside it")
        self._start, self._size = self._shift + offset, size

    def entries(self) -> Iterator[_ZipEntry]:
        """The entries in directory order, read in pieces of ``_CHUNK`` bytes."""
        buf, at, pos, end = b"", 0, self._start, self._start + self._size
        for _ in range(self.count):
            if len(buf) - at < _CENTRAL.size or len(buf) - at < self._entry_size(buf, at):
                self._source.seek(pos)
                want = min(_CHUNK, end - pos)
                buf, at = read_up_to(cast(BinaryReader, self._source), max(want, 0)), 0
                if len(buf) < _CENTRAL.size or len(buf) < self._entry_size(buf, 0):
                    raise InspectionError(
                        "malformed or truncated ZIP archive: the central directory is cut off"
                    )
            entry, used = self._entry(buf, at)
            at += used
            pos += used
            yield entry

    @staticmethod
    def _entry_size(buf: bytes, at: int) -> int:
        if len(buf) - at < _CENTRAL.size:
            return _CENTRAL.size
        names: tuple[int, int, int] = struct.unpack_from("<3H", buf, at + 28)
        return _CENTRAL.size + sum(names)

    def _entry(self, buf: bytes, at: int) -> tuple[_ZipEntry, int]:
        fields = _CENTRAL.unpack_from(buf, at)
        if fields[0] != b"PK\x01\x02":
            raise InspectionError("malformed ZIP archive: a bad central directory entry")
        flags, method, crc, compressed, size = (
            fields[5],
            fields[6],
            fields[9],
            fields[10],
            fields[11],
        )
        name_size, extra_size, comment_size, offset = fields[12], fields[13], fields[14], fields[18]
        start = at + _CENTRAL.size
        raw_name = buf[start : start + name_size]
        name = raw_name.decode("utf-8", "replace") if flags & 0x800 else raw_name.decode("cp437")
        extra = buf[start + name_size : start + name_size + extra_size]
        size, compressed, offset = _zip64_sizes(extra, size, compressed, offset)
        entry = _ZipEntry(name, flags, method, crc, compressed, size, self._shift + offset)
        return entry, _CENTRAL.size + name_size + extra_size + comment_size


def _zip64_sizes(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset of an entry, from its zip64 extra field where they overflowed."""
    wanted = [value == 0xFFFFFFFF for value in (size, compressed, offset)]
    if not any(wanted):
        return size, compressed, offset
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, at)
        if kind == 1:
            values = [size, compressed, offset]
            field = at + 4
            for index, overflowed in enumerate(wanted):
                if overflowed and field + 8 <= at + 4 + length:
                    values[index] = struct.unpack_from("<Q", extra, field)[0]
                    field += 8
            return values[0], values[1], values[2]
        at += 4 + length
    raise InspectionError("malformed ZIP archive: sizes past 4 GiB without a zip64 field")


class _Slice:
    """``length`` bytes of ``source`` from ``start``; each read seeks first (the archive's
    file is shared with the directory walk and other members)."""

    def __init__(self, source: IO[bytes], start: int, length: int) -> None:
        self._source, self._start, self._length, self._pos = source, start, length, 0

    def read(self, size: int = -1, /) -> bytes:
        left = self._length - self._pos
        size = left if size < 0 else min(size, left)
        if size <= 0:
            return b""
        self._source.seek(self._start + self._pos)
        data = self._source.read(size)
        self._pos += len(data)
        return data

    def close(self) -> None:
        """The archive's file stays open for the other members."""


class _Inflating:
    """Raw deflate, at most ``size`` bytes of output a read."""

    def __init__(self, raw: BinaryReader) -> None:
        self._raw = raw
        self._inflater = zlib.decompressobj(-15)

    def read(self, size: int = -1, /) -> bytes:
        size = _CHUNK if size < 0 else size
        while size and not self._inflater.eof:
            data = self._inflater.unconsumed_tail or self._raw.read(_CHUNK)
            if not data:
                raise EOFError("the deflate stream ends before its end")
            out = self._inflater.decompress(data, size)
            if out:
                return out
        return b""

    def close(self) -> None:
        self._raw.close()


def _lzma_member(raw: BinaryReader) -> BinaryReader:
    """A ZIP LZMA member: its version and properties, then a raw LZMA1 stream."""
    header = read_up_to(raw, 4)
    props_size = struct.unpack_from("<H", header, 2)[0] if len(header) == 4 else 0
    props = read_up_to(raw, props_size)
    if len(props) < 5:
        raise InspectionError("malformed ZIP LZMA member: its properties are cut off")
    byte, dict_size = props[0], struct.unpack_from("<L", props, 1)[0]
    lzma1 = {
        "id": lzma.FILTER_LZMA1,
        "pb": byte // 45,
        "lp": byte % 45 // 9,
        "lc": byte % 9,
        "dict_size": dict_size,
    }
    reader = lzma.LZMAFile(  # noqa: SIM115 - the member's reader, closed by its caller
        cast(IO[bytes], raw), format=lzma.FORMAT_RAW, filters=[lzma1]
    )
    return cast(BinaryReader, reader)


class _ZipMember:
    """A member's bytes, decompressed piecewise within ``budget``, up to its declared size
    and checked against its CRC-32 at the end. Seekable (nested archives, the Kineto tail
    look-up): forward by reading on, backward by starting over."""

    def __init__(self, source: IO[bytes], entry: _ZipEntry, budget: Budget) -> None:
        if entry.flags & 1:
            raise InspectionError("encrypted: the member cannot be read without its password")
        if entry.method not in _METHODS:
            raise InspectionError(f"unsupported ZIP compression method {entry.method}")
        source.seek(entry.offset)
        header = read_up_to(cast(BinaryReader, source), _LOCAL.size)
        if len(header) < _LOCAL.size or header[:4] != b"PK\x03\x04":
            raise InspectionError("malformed ZIP archive: a bad local file header")
        names = _LOCAL.unpack(header)[10:12]
        self._source, self._entry, self._budget = source, entry, budget
        self._data_at = entry.offset + _LOCAL.size + sum(names)
        self._reader = self._open()
        self._pos = 0
        self._crc = 0

    def _open(self) -> BinaryReader:
        raw = _Slice(self._source, self._data_at, self._entry.compressed)
        method = self._entry.method
        if method == _STORED:
            return raw
        if method == _DEFLATED:
            inner: BinaryReader = _Inflating(raw)
        elif method == _BZIP2:
            inner = cast(BinaryReader, bz2.BZ2File(cast(IO[bytes], raw), mode="rb"))
        else:
            inner = _lzma_member(raw)
        return Budgeted(inner, self._budget)

    def read(self, size: int = -1, /) -> bytes:
        left = self._entry.size - self._pos
        if left <= 0:
            if self._crc != self._entry.crc:
                raise InspectionError(
                    "malformed ZIP member: its bytes do not match its CRC-32 "
                    f"({self._crc:08x}, the directory says {self._entry.crc:08x})"
                )
            return b""
        data = self._reader.read(left if size < 0 else min(size, left))
        if not data and size != 0:
            raise InspectionError(
                f"truncated: the {_METHODS[self._entry.method]} data of the member ends after "
                f"{self._pos:,} of its {self._entry.size:,} bytes"
            )
        self._pos += len(data)
        self._crc = zlib.crc32(data, self._crc)
        return data

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0, /) -> int:
        target = offset + (0, self._pos, self._entry.size)[whence]
        target = max(0, min(target, self._entry.size))
        if target < self._pos:
            self._reader = self._open()
            self._pos, self._crc = 0, 0
        while self._pos < target:
            if not self.read(min(_CHUNK, target - self._pos)):
                break
        return self._pos

    def close(self) -> None:
        """The archive's file stays open for the other members."""
