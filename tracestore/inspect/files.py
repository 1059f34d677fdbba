"""Inspecting one file: unwrap gzip/zstd/bzip2/xz, recognise the format, hand over to its reader.

The format is recognised from the first bytes, never from the name alone (the name only
breaks a tie for Chakra traces without a metadata message). Whatever happens while reading,
the answer is a ``FileInspection``: an unknown format is ``unknown``, a truncated or
malformed file is ``failed`` with a reason, and nothing is raised. What one stored file may
cost is bounded by ``Limits``: its decompressed bytes (members and nested files included)
and the members inspected per archive; past either, it is ``failed`` with the reason and
keeps what was read.

A Kineto trace's bytes can be handed on as the scan reads them (``tap``, called with each
window: the analysis of ``tracestore.analysis`` shares the pass rather than read the file
again).
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import zstandard

from tracestore.inspect import archives, chakra, chakra_json, comm_groups, kineto, pytorch_et
from tracestore.inspect.jsonscan import Tap
from tracestore.inspect.model import Draft, FileInspection, Format, InspectionError
from tracestore.inspect.streams import (
    DEFAULT_LIMITS,
    HEAD_SIZE,
    BinaryReader,
    Budget,
    Failing,
    Limits,
    PrefixedReader,
    decompressed,
    detect_compression,
    read_chunk,
    read_up_to,
    rewound,
    tell,
)

Opener = Callable[[], BinaryReader]
MAX_ARCHIVE_DEPTH = 3

_KINETO_KEYS = re.compile(
    rb'"(?:traceEvents|schemaVersion|deviceProperties|distributedInfo|displayTimeUnit)"\s*:'
)
_ET_SCHEMA = re.compile(rb'"schema"\s*:\s*"')
_ET_KEYS = re.compile(rb'"(?:nodes|start_ts|finish_ts)"\s*:')
_CHROME_EVENT = re.compile(rb'"ph"\s*:')


def inspect_file(
    opener: Opener,
    name: str,
    *,
    quick: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    stored_size: int | None = None,
    tap: Tap | None = None,
) -> FileInspection:
    """Inspect the file ``opener()`` returns (a binary file object, closed afterwards).

    ``name`` is the file's name in the traceset (or its path); Chakra ranks come from it.
    ``quick=True`` stops a Kineto trace as soon as its ``distributedInfo`` is read (rank and
    world size), leaving time span and collectives empty, and an execution trace at its first
    ``record_param_comms`` row on the default group; other formats ignore it.
    ``limits`` bound the work; ``stored_size`` (the file's bytes, when known) sets its
    budget of decompressed bytes. ``tap``, when the file is a Kineto trace (not a member of
    an archive), is handed every byte of its JSON as a full scan reads them, in order.
    """
    budget = limits.budget(stored_size)
    return _inspect(opener, name, quick=quick, depth=0, limits=limits, budget=budget, tap=tap)


def inspect_path(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    quick: bool = False,
    limits: Limits = DEFAULT_LIMITS,
) -> FileInspection:
    """Inspect a local file; ``name`` defaults to the path as given."""
    location = Path(path)
    try:
        size: int | None = location.stat().st_size
    except OSError:
        size = None  # opening it reports why
    return inspect_file(
        lambda: location.open("rb"), name or str(path), quick=quick, limits=limits, stored_size=size
    )


class _Head:
    """A file's first bytes standing for the whole file, read once from the start: ``past``
    says whether a reader asked for bytes after them."""

    def __init__(self, head: bytes) -> None:
        self._head = memoryview(head)
        self._at = 0
        self.past = False

    def read(self, size: int = -1, /) -> bytes:
        end = len(self._head) if size < 0 else self._at + size
        if end > len(self._head):
            self.past = True
        chunk = bytes(self._head[self._at : end])
        self._at += len(chunk)
        return chunk

    def close(self) -> None:
        self._head.release()


def inspect_head(
    head: bytes, name: str, size: int, *, limits: Limits = DEFAULT_LIMITS
) -> tuple[FileInspection, bool]:
    """Quickly inspect a file of ``size`` bytes of which only ``head``, its first bytes, is
    at hand (what a browser sends of a file before uploading it): as ``inspect_path(quick=
    True)`` inspects the whole file when ``head`` is all of it; otherwise from a stream that
    ends after ``head``, and whether the inspection asked for bytes past it (then what it
    says, a rank above all, may be missing what they hold). Decompression is budgeted by
    ``len(head)``: the work grows with the bytes given, not with ``size``."""
    if len(head) >= size:
        whole = inspect_file(
            lambda: io.BytesIO(head), name, quick=True, limits=limits, stored_size=len(head)
        )
        return whole, False
    reader = _Head(head)
    found = inspect_file(lambda: reader, name, quick=True, limits=limits, stored_size=len(head))
    return found, reader.past


def sniff_format(head: bytes, name: str) -> Format:
    """The format of a (decompressed) stream from its first bytes."""
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{" and text[1:].lstrip()[:1] in (b'"', b"}", b""):
        if _ET_SCHEMA.search(head) and _ET_KEYS.search(head):
            return "pytorch_et_json"
        if _KINETO_KEYS.search(head):
            return "kineto_json"
        if chakra_json.sniff(text):
            return "chakra_json"
        return "comm_groups" if comm_groups.groups_in(head) is not None else "unknown"
    if text[:1] == b"[" and _CHROME_EVENT.search(head):
        return "kineto_json"
    if text[:1] == b"[" and chakra_json.sniff(text):
        return "chakra_json"
    if chakra.sniff(head, name):
        return "chakra_et"
    return "unknown"


def _inspect(
    opener: Opener,
    name: str,
    *,
    quick: bool,
    depth: int,
    limits: Limits,
    budget: Budget,
    tap: Tap | None = None,
) -> FileInspection:
    draft = Draft(name=name, nested=depth > 0)
    try:
        raw = opener()
    except Exception as exc:
        return draft.freeze(f"cannot open: {exc}")
    try:
        with closing(raw):
            _scan(raw, draft, quick=quick, depth=depth, limits=limits, budget=budget, tap=tap)
    except InspectionError as exc:
        return draft.freeze(str(exc))
    except EOFError:
        stream = f"{draft.compression} stream" if draft.compression else "data"
        return draft.freeze(f"truncated: the {stream} ends before its end marker")
    except (gzip.BadGzipFile, zlib.error) as exc:
        return draft.freeze(f"malformed gzip stream: {exc}")
    except zstandard.ZstdError as exc:
        return draft.freeze(f"malformed zstd stream: {exc}")
    except lzma.LZMAError as exc:
        return draft.freeze(f"malformed {draft.compression or 'LZMA'} stream: {exc}")
    except zipfile.BadZipFile as exc:
        return draft.freeze(f"malformed or truncated ZIP archive: {exc}")
    except tarfile.TarError as exc:
        return draft.freeze(f"truncated or malformed tar archive: {exc}")
    except OSError as exc:
        if draft.compression == "bzip2" and str(exc) == "Invalid data stream":
            return draft.freeze("malformed bzip2 stream: invalid data")
        return draft.freeze(f"read error: {exc}")
    except Exception as exc:  # the contract is a result, never an exception
        return draft.freeze(f"unexpected {type(exc).__name__}: {exc}")
    return draft.freeze()


def _scan(
    raw: BinaryReader,
    draft: Draft,
    *,
    quick: bool,
    depth: int,
    limits: Limits,
    budget: Budget,
    tap: Tap | None,
) -> None:
    origin = tell(raw)
    head = read_up_to(raw, HEAD_SIZE)
    failure: Exception | None = None
    stream: BinaryReader = raw
    seekable = origin is not None
    compression = detect_compression(head)
    if compression is not None:
        draft.compression = compression
        stream = decompressed(rewound(raw, head, origin), compression, budget)
        head, failure = read_chunk(stream, HEAD_SIZE)
        if failure is not None:
            stream = Failing(failure)  # scan the intact head first, then report the break
        seekable = False
    draft.format = sniff_format(head, draft.name)
    if draft.format == "unknown":
        draft.bytes_scanned = len(head)
        if failure is not None:
            raise failure
        return
    stream = rewound(raw, head, origin) if seekable else PrefixedReader(head, stream)

    def inspect_member(member_opener: Opener, member_name: str) -> FileInspection:
        return _inspect(
            member_opener,
            member_name,
            quick=quick,
            depth=depth + 1,
            limits=limits,
            budget=budget,
        )

    if draft.format in ("zip", "tar") and depth >= MAX_ARCHIVE_DEPTH:
        raise InspectionError(f"archive nested more than {MAX_ARCHIVE_DEPTH} levels deep")
    if draft.format == "kineto_json":
        kineto.scan(stream, draft, quick=quick, seekable=seekable, tap=tap)
    elif draft.format == "pytorch_et_json":
        pytorch_et.scan(stream, draft, quick=quick)
    elif draft.format == "chakra_et":
        chakra.scan(stream, draft)
    elif draft.format == "chakra_json":
        chakra_json.scan(stream, draft)
    elif draft.format == "comm_groups":
        comm_groups.scan(stream, draft)
    elif draft.format == "zip":
        archives.scan_zip(
            stream, draft, inspect_member, seekable=seekable, limits=limits, budget=budget
        )
    else:
        archives.scan_tar(stream, draft, inspect_member, max_members=limits.members)
