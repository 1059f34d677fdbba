"""Analysing a Kineto file: open it (gzip and zstd unwrapped), read it once, answer.

The rank comes from the file's inspection (``distributedInfo``, read by the quick
inspection, which stops there); the analysis reads the bytes in chunks and hands them to
``KinetoEvents``, which also checks that the document is whole. Whatever goes wrong,
``analyze_path`` and ``analyze_opened`` answer with a reason rather than an exception.
``RankTap`` is the analysis fed by another pass over the same bytes: inspection's
(``inspect_file(..., tap=...)``), so that a stored file is read once for both.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib
from collections.abc import Callable
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
    tell,
)


@dataclass(frozen=True)
class FileOutcome:
    """A file's analysis, or why there is none."""

    file: str
    rank: AnalysedRank | None
    reason: str | None = None
    kineto: bool = True  # whether the file is a Kineto trace (one that failed is reported)
    rank_number: int | None = None  # the file's rank, as its inspection found it


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
    return unwrapped(Path(path).open("rb"), budget)


def unwrapped(
    raw: BinaryReader, budget: Budget | None = None
) -> tuple[BinaryReader, Compression | None]:
    """``raw``'s JSON bytes, decompressed (within ``budget``), and the compression; the
    reader returned closes ``raw``."""
    try:
        origin = tell(raw)
        head = read_up_to(raw, HEAD_SIZE)
        compression = detect_compression(head)
        stream = rewound(raw, head, origin)
        if compression is None:
            return stream, None
        budget = budget or Budget(sys.maxsize, "no limit for a local file")
        return decompressed(stream, compression, budget), compression
    except BaseException:
        raw.close()
        raise


def analyze_opened(
    opener: Callable[[], BinaryReader],
    limits: Limits | None = None,
    directory: str | None = None,
    budget: Budget | None = None,
) -> tuple[RankAnalysis | None, str | None]:
    """The analysis of the Kineto trace ``opener()`` returns (a stored file: its decompressed
    bytes within ``budget``), or None and why not."""
    compression: Compression | None = None
    try:
        stream, compression = unwrapped(opener(), budget)
        try:
            return analyze_stream(stream, limits, directory), None
        finally:
            stream.close()
    except (InspectionError, AnalysisError) as exc:
        return None, str(exc)
    except EOFError:
        return None, f"truncated: the {compression} stream ends before its end marker"
    except (gzip.BadGzipFile, zlib.error) as exc:
        return None, f"malformed gzip stream: {exc}"
    except zstandard.ZstdError as exc:
        return None, f"malformed zstd stream: {exc}"
    except OSError as exc:
        return None, f"read error: {exc}"


class RankTap:
    """One rank's analysis fed by another pass over its bytes: call it with each window
    (``inspect.jsonscan.Tap``), then ``finish``. It never raises into that pass: the first
    problem stops it and becomes its reason."""

    def __init__(self, limits: Limits | None = None, directory: str | None = None) -> None:
        self._collector = RankCollector(limits, directory)
        self._events = KinetoEvents(self._collector)
        self.fed = False  # whether any bytes came (the file was a Kineto trace)
        self.reason: str | None = None

    def __call__(self, buf: bytes, end: int) -> None:
        if self.reason is not None:
            return
        self.fed = True
        try:
            self._events.feed(buf, end)
        except (InspectionError, AnalysisError) as exc:
            self._stop(str(exc))
        except Exception as exc:  # the pass it rides on must go on whatever happens here
            self._stop(f"unexpected {type(exc).__name__}: {exc}")

    def _stop(self, reason: str) -> None:
        self.reason = reason
        self._collector.close()

    def finish(self) -> tuple[RankAnalysis | None, str | None]:
        """The analysis of every byte handed over (the whole file), or None and why not."""
        if self.reason is not None:
            return None, self.reason
        try:
            self._events.close()
            return self._collector.finish(), None
        except (InspectionError, AnalysisError) as exc:
            return None, str(exc)
        finally:
            self._collector.close()

    def close(self) -> None:
        """Drop what was collected (the pass failed before its end)."""
        self._collector.close()


def analyze_path(
    path: str | os.PathLike[str],
    name: str | None = None,
    limits: Limits | None = None,
    directory: str | None = None,
) -> FileOutcome:
    """Analyse a local file; ``name`` (default: the path as given) is how it is reported."""
    name = name or str(path)
    inspection = inspect_path(path, name, quick=True)
    kineto, rank = inspection.format == "kineto_json", inspection.rank
    if inspection.status == "failed":
        return FileOutcome(name, None, inspection.reason, kineto, rank)
    if not kineto:
        return FileOutcome(name, None, f"not a Kineto trace (read as {inspection.format})", False)
    analysis, reason = analyze_opened(_opener(path), limits, directory)
    if analysis is None:
        return FileOutcome(name, None, reason, True, rank)
    return FileOutcome(name, AnalysedRank(rank, name, analysis), rank_number=rank)


def _opener(path: str | os.PathLike[str]) -> Callable[[], BinaryReader]:
    def opened() -> BinaryReader:
        return Path(path).open("rb")  # analyze_opened closes it

    return opened
