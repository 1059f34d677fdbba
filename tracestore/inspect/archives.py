"""ZIP and tar archives of traces: each member inspected in place, nothing written to disk.

ZIP needs random access (its directory is at the end), so it needs a seekable file object;
tar is read as a stream, member after member, so it works on anything readable (including
the output of a gzip or zstd decompressor: ``.tar.gz``, ``.tar.zst``). The AppleDouble
files macOS adds to archives it makes are skipped.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable
from typing import IO, cast

from tracestore.inspect.model import Draft, FileInspection, InspectionError
from tracestore.inspect.streams import BinaryReader

Opener = Callable[[], BinaryReader]
InspectMember = Callable[[Opener, str], FileInspection]


def is_resource_fork(name: str) -> bool:
    """macOS AppleDouble files (``._name``, ``__MACOSX/...``): metadata, never a trace."""
    return name.rsplit("/", 1)[-1].startswith("._") or name.startswith("__MACOSX/")


def scan_zip(
    stream: BinaryReader, draft: Draft, inspect_member: InspectMember, *, seekable: bool
) -> None:
    """Inspect every file member of a ZIP archive."""
    if not seekable:
        raise InspectionError(
            "a ZIP archive needs random access: it cannot be read from a compressed or "
            "streamed source"
        )
    with zipfile.ZipFile(cast(IO[bytes], stream)) as archive:
        for info in archive.infolist():
            if info.is_dir() or is_resource_fork(info.filename):
                continue

            def opener(info: zipfile.ZipInfo = info) -> BinaryReader:
                return archive.open(info)

            member = inspect_member(opener, info.filename)
            draft.members.append(member)
            draft.bytes_scanned += member.bytes_scanned


def scan_tar(stream: BinaryReader, draft: Draft, inspect_member: InspectMember) -> None:
    """Inspect every regular file of a tar stream, in order."""
    with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|") as archive:
        while (info := archive.next()) is not None:
            # A stream-mode TarFile keeps every header it has read; members are not
            # revisited here, so dropping them keeps memory flat on huge archives.
            archive.members.clear()  # type: ignore[attr-defined]
            if not info.isfile() or is_resource_fork(info.name):
                continue
            member_file = archive.extractfile(info)
            if member_file is None:
                continue

            def opener(member_file: IO[bytes] = member_file) -> BinaryReader:
                return member_file

            member = inspect_member(opener, info.name)
            draft.members.append(member)
            draft.bytes_scanned += member.bytes_scanned
