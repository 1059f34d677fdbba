"""Analysing a Kineto file: open it (gzip and zstd unwrapped), read it once, answer.

The rank comes from the file's inspection (``distributedInfo``, read by the quick
inspection, which stops there); the analysis reads the bytes in chunks and hands them to
``KinetoEvents``, which also checks that the document is whole. Whatever goes wrong,
``analyze_path`` answers with a reason rather than an exception.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import zstandard

from tracestore.analysis.kineto_events import KinetoEvents
from tracestore.analysis.model import RankAnalysis
from tracestore.analysis.rank import AnalysisError, Limits, RankCollector
from tracestore.analysis.summary import AnalysedRank
from tracestore.inspect.files import inspect_path
from tracestore.inspect.jsonscan import CHUNK_SIZE
from tracestore.inspect.model import Compression, InspectionError
from tracestore.inspect.streams import (
    HEAD_SIZE,
    BinaryReader,
    Budget,
    decompressed,
    detect_compression,
    read_chunk,
    read_up_to,
    rewound,
)


@dataclass(frozen=True)
class FileOutcome:
    """A file's analysis, or why there is none."""

    file: str
    rank: AnalysedRank | None
    reason: str | None = None


def analyze_stream(
    stream: BinaryReader, limits: Limits | None = None, directory: str | None = None
) -> RankAnalysis:
    """The analysis of the (decompressed) Kineto JSON ``stream``.

    Raises ``InspectionError`` for a truncated or malformed document and ``AnalysisError``
    for one past ``limits``.
    """
    collector = RankCollector(limits, directory)
    try:
        events = KinetoEvents(collector)
        while True:
            data, failure = read_chunk(stream, CHUNK_SIZE)
            if data:
                events.feed(data, len(data))
            if failure is not None:
                raise failure
            if len(data) < CHUNK_SIZE:
                break
        events.close()
        return collector.finish()
    finally:
        collector.close()


def open_trace(
    path: str | os.PathLike[str], budget: Budget | None = None
) -> tuple[BinaryReader, Compression | None]:
    """A reader of the file's JSON bytes, decompressed, and the compression. ``budget``
    bounds the decompressed bytes (a stored file's, as inspection bounds them); a local
    file a user analyses is read whole without one."""
    raw = Path(path).open("rb")  # noqa: SIM115 - the caller closes the reader
    try:
        head = read_up_to(raw, HEAD_SIZE)
        compression = detect_compression(head)
        stream = rewound(raw, head, 0)
        if compression is None:
            return stream, None
        budget = budget or Budget(sys.maxsize, "no limit for a local file")
        return decompressed(stream, compression, budget), compression
    except BaseException:
        raw.close()
        raise


def analyze_path(
    path: str | os.PathLike[str],
    name: str | None = None,
    limits: Limits | None = None,
    directory: str | None = None,
) -> FileOutcome:
    """Analyse a local file; ``name`` (default: the path as given) is how it is reported."""
    name = name or str(path)
    inspection = inspect_path(path, name, quick=True)
    if inspection.status == "failed":
        return FileOutcome(name, None, inspection.reason)
    if inspection.format != "kineto_json":
        return FileOutcome(name, None, f"not a Kineto trace (read as {inspection.format})")
    compression: Compression | None = None
    try:
        stream, compression = open_trace(path)
        try:
            analysis = analyze_stream(stream, limits, directory)
        finally:
            stream.close()
    except (InspectionError, AnalysisError) as exc:
        return FileOutcome(name, None, str(exc))
    except EOFError:
        return FileOutcome(
            name, None, f"truncated: the {compression} stream ends before its end marker"
        )
    except (gzip.BadGzipFile, zlib.error) as exc:
        return FileOutcome(name, None, f"malformed gzip stream: {exc}")
    except zstandard.ZstdError as exc:
        return FileOutcome(name, None, f"malformed zstd stream: {exc}")
    except OSError as exc:
        return FileOutcome(name, None, f"read error: {exc}")
    return FileOutcome(name, AnalysedRank(inspection.rank, name, analysis))
