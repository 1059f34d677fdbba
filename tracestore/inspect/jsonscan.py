"""Scanning huge JSON traces in bounded memory, without a JSON tokenizer.

A pure-Python tokenizer is far slower than ``json.load``; instead the trace is read in large
chunks and searched with ``re`` and ``bytes.find`` for the few members the inspectors need.
Each chunk is cut just after a ``}``: no pattern used here can contain ``}``, so no match is
ever split between two chunks. Small objects the inspectors want whole (``distributedInfo``)
are decoded with ``json.JSONDecoder.raw_decode`` on a bounded window.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import compress
from operator import add
from typing import Any

from tracestore.inspect.collectives import summarize
from tracestore.inspect.model import Draft, InspectionError, Number, TimeSpan
from tracestore.inspect.streams import BinaryReader, read_chunk

CHUNK_SIZE = 4 * 1024 * 1024
# Handed each window's new bytes as ``tap(buf, end)`` (``buf[:end]``), in stream order.
Tap = Callable[[bytes, int], None]
# The largest object (distributedInfo ...) decoded whole: decoding one costs several copies
# of its text, and a real distributedInfo of thousands of process groups is a few MiB.
MAX_OBJECT = 16 * 1024 * 1024

# Names of events that are collective operations or carry one: the profiler's
# record_param_comms, backend annotations (nccl:all_reduce, gloo:broadcast), c10d ops and
# NCCL/RCCL kernels. "{}" are excluded so that no match can span a chunk cut.
_NAME_RE = re.compile(
    rb'"name":\s*"((?:nccl|rccl|record_param_comms|gloo:|ucc:|mpi:|c10d::)[^"\\{}]{0,500})"'
)
_RPC_COLLECTIVE_RE = re.compile(
    rb'"record_param_comms"[^{}]{0,4096}?"args":\s*\{[^{}]{0,16384}?'
    rb'"Collective name":\s*"([^"\\{}]{0,200})"'
)
_NUM = rb"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_LOOSE_NUM = rb"([-+.\deE]+)"  # cheaper to match; ``numbers`` sorts out the odd non-number


def key_pattern(key: str) -> re.Pattern[bytes]:
    """``"key":`` followed by optional whitespace."""
    return re.compile(b'"' + re.escape(key.encode()) + rb'"\s*:\s*')


def find_key(pattern: re.Pattern[bytes], buf: bytes, end: int) -> re.Match[bytes] | None:
    """The first match of a ``key_pattern``/``number_pattern`` in ``buf[:end]``.

    ``bytes.find`` looks for the quoted key far faster than the regex engine would.
    """
    key = pattern.pattern[: pattern.pattern.index(b'"', 1) + 1]
    pos = buf.find(key, 0, end)
    while pos >= 0:
        match = pattern.match(buf, pos, end)
        if match:
            return match
        pos = buf.find(key, pos + 1, end)
    return None


def number_pattern(key: str) -> re.Pattern[bytes]:
    """``"key": <number>`` capturing the number."""
    return re.compile(b'"' + re.escape(key.encode()) + rb'"\s*:\s*' + _NUM)


# Every "ts", with the "dur" that Kineto writes right after it when the event has one.
_TS_DUR_RE = re.compile(rb'"ts":\s*' + _LOOSE_NUM + rb'(?:,\s*"dur":\s*' + _LOOSE_NUM + b")?")
_DUR_TS_RE = re.compile(rb'"dur":\s*' + _LOOSE_NUM + rb',\s*"ts":\s*' + _LOOSE_NUM)
_STRICT_TS_DUR_RE = re.compile(rb'"ts":\s*' + _NUM + rb'(?:,\s*"dur":\s*' + _NUM + b")?")
_STRICT_DUR_TS_RE = re.compile(rb'"dur":\s*' + _NUM + rb',\s*"ts":\s*' + _NUM)


def numbers(texts: list[bytes] | tuple[bytes, ...]) -> list[Number]:
    """Parse JSON number texts: ints where all are integral, else floats.

    Raises ValueError for a text that is no number at all.
    """
    try:
        return list(map(int, texts))
    except ValueError:
        return list(map(float, texts))


def _int_if_integral(value: Number) -> Number:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


@dataclass
class Window:
    """One step of a chunked scan: search ``buf[:end]``; ``buf[end:]`` comes round again."""

    buf: bytes
    end: int
    eof: bool
    offset: int  # stream offset of buf[0]


class ChunkedScan:
    """Iterates ``Window`` objects over a stream; ``hold(pos)`` re-presents ``buf[pos:]``."""

    def __init__(self, stream: BinaryReader, draft: Draft, chunk_size: int = CHUNK_SIZE) -> None:
        self._stream = stream
        self._draft = draft
        self._chunk_size = chunk_size
        self._hold: int | None = None
        self.first_byte = b""  # the first non-blank byte of the stream
        self.last_byte = b""  # the last non-blank byte of the stream, once at its end
        self.depth = 0  # of braces: opened minus closed

    def hold(self, pos: int) -> None:
        """Ask for ``buf[pos:]`` to be part of the next window (an object not yet complete)."""
        self._hold = pos

    def __iter__(self) -> Iterator[Window]:
        carry = b""
        offset = 0
        while True:
            data, failure = read_chunk(self._stream, self._chunk_size)
            self._draft.bytes_scanned += len(data)
            eof = failure is not None or len(data) < self._chunk_size
            buf = carry + data if carry else data
            end = len(buf) if eof else _cut(buf)
            self._hold = None
            if not self.first_byte:
                self.first_byte = buf.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
            window = Window(buf, end, eof, offset)
            yield window
            if failure is not None:
                raise failure
            cut = window.end if self._hold is None else min(window.end, self._hold)
            self.depth += buf.count(b"{", 0, cut) - buf.count(b"}", 0, cut)
            if eof:
                stripped = buf.rstrip()
                self.last_byte = stripped[-1:] if stripped else self.last_byte
                return
            if len(buf) - cut > MAX_OBJECT:
                raise InspectionError(
                    f"malformed: no object boundary within {MAX_OBJECT} bytes at byte {offset}"
                )
            carry = buf[cut:]
            offset += cut

    def check_closed(self, kind: str) -> None:
        """Raise when the document visibly ends before it is closed (a truncated file).

        Every truncation of an object document leaves a brace open; an array document (a
        bare Chrome trace event list) must also end with its ``]``.
        """
        closing = b"]" if self.first_byte == b"[" else b"}"
        if self.last_byte != closing or self.depth > 0:
            still_open = f" ({self.depth} '{{' still open)" if self.depth > 0 else ""
            raise InspectionError(
                f"truncated: the {kind} JSON document ends after "
                f"{self._draft.bytes_scanned} bytes before it is closed{still_open}"
            )


def _cut(buf: bytes) -> int:
    cut = buf.rfind(b"}") + 1
    return cut if cut > 0 else len(buf)


def decode_value_at(window: Window, pos: int, first_try: int = 64 * 1024) -> tuple[Any, int] | None:
    """Decode the JSON value starting at ``window.buf[pos]``.

    Returns ``(value, end)``, or None when the value runs past the window and more of the
    stream is needed. Raises ``InspectionError`` for a value that is not valid JSON.
    ``first_try`` bytes are decoded first (four times more on each retry): small for values
    met often, so that each costs its own size.
    """
    buf = window.buf
    size = first_try
    while True:
        stop = min(len(buf), pos + size)
        text = buf[pos:stop].decode("utf-8", "replace")
        try:
            value, used = json.JSONDecoder().raw_decode(text)
        except ValueError as exc:
            if not isinstance(exc, json.JSONDecodeError):  # an integer past int's digit limit
                raise InspectionError(
                    f"malformed JSON at byte {window.offset + pos}: {exc}"
                ) from None
            if stop < len(buf):
                size *= 4
                continue
            if exc.pos < len(text) - 64:
                raise InspectionError(
                    f"malformed JSON at byte {window.offset + pos}: {exc.msg}"
                ) from None
            if window.eof:
                raise InspectionError(
                    f"truncated: the value at byte {window.offset + pos} is cut off by the end "
                    "of the data"
                ) from None
            return None
        return value, pos + len(text[:used].encode("utf-8"))


class TimeSpanScan:
    """Earliest ``ts`` and latest ``ts + dur`` over all events seen."""

    def __init__(self) -> None:
        self.start: Number | None = None
        self.end: Number | None = None

    def feed(self, buf: bytes, end: int) -> None:
        """Fold in the events of ``buf[:end]``."""
        try:
            self._feed(buf, end, _TS_DUR_RE, _DUR_TS_RE)
        except ValueError:  # "ts": something that is not a number; match strictly instead
            self._feed(buf, end, _STRICT_TS_DUR_RE, _STRICT_DUR_TS_RE)

    def _feed(
        self, buf: bytes, end: int, ts_dur: re.Pattern[bytes], dur_ts: re.Pattern[bytes]
    ) -> None:
        found = ts_dur.findall(buf, 0, end)
        if not found:
            return
        stamps, durations = zip(*found, strict=True)
        values = numbers(stamps)
        lo, hi = min(values), max(values)
        # compress() keeps the stamps whose duration text is non-empty (b"" is falsy).
        with_dur = list(compress(values, durations))
        if with_dur:
            lasting = numbers([d for d in durations if d])
            hi = max(hi, max(map(add, with_dur, lasting)))
        if len(with_dur) < buf.count(b'"dur"', 0, end):  # some events write dur before ts
            for dur, ts in dur_ts.findall(buf, 0, end):
                hi = max(hi, numbers([ts])[0] + numbers([dur])[0])
        self.start = lo if self.start is None else min(self.start, lo)
        self.end = hi if self.end is None else max(self.end, hi)

    def result(self, base_us: Number = 0) -> TimeSpan | None:
        """The span, shifted by ``base_us`` (a trace's baseTimeNanoseconds / 1000)."""
        if self.start is None or self.end is None:
            return None
        return TimeSpan(
            _int_if_integral(self.start + base_us), _int_if_integral(self.end + base_us)
        )


class CollectiveScan:
    """Counts of collective event names, and of record_param_comms' collective names."""

    def __init__(self) -> None:
        self.events: Counter[bytes] = Counter()
        self.named: Counter[bytes] = Counter()

    def feed(self, buf: bytes, end: int) -> None:
        """Fold in the events of ``buf[:end]``."""
        names = _NAME_RE.findall(buf, 0, end)
        self.events.update(names)
        if b"record_param_comms" in names:
            self.named.update(_RPC_COLLECTIVE_RE.findall(buf, 0, end))

    def store(self, draft: Draft) -> None:
        """Write ``collectives`` and ``collective_events`` into the draft."""
        events = {k.decode("utf-8", "replace"): v for k, v in self.events.items()}
        named = {k.decode("utf-8", "replace"): v for k, v in self.named.items()}
        draft.collective_events, draft.collectives = summarize(events, named)
