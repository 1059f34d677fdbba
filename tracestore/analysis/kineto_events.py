"""The events of a Kineto trace the analysis needs, read from its bytes window by window.

``KinetoEvents.feed(buf, end)`` takes the windows of ``inspect.jsonscan.ChunkedScan`` (so an
inspection that reads the same bytes can hand them over too); ``close()`` ends the pass.
Each window is cut at the last boundary between two events (``}`` ``,`` ``{"key":``: such a
``{"`` cannot lie inside a JSON string), and the text before it is read one of two ways:

- **fast**, for the layout PyTorch's profiler writes (``"ph": "X", "cat": ..., "name": ...,
  "pid": ..., "tid": ..., "ts": ..., "dur": ..., "args": {...}``): one regular expression
  finds every device event and launch, another every ``ProfilerStep#N``; their columns go to
  the collector in bulk;
- **exact**, when the fast reading does not account for every event of interest in the text
  (another writer's key order, an unusual value): each event is decoded with ``json`` and
  looked at whole. Slower, never wrong.

Times become integer nanoseconds from their decimal text (``"ts": 5093617.123``), never
through a float, so that fractional microseconds add up exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracestore.analysis.model import COMMUNICATION, COMPUTATION, MEMORY
from tracestore.analysis.rank import NONE, AnalysisError, RankCollector
from tracestore.inspect.model import InspectionError

MAX_EVENT = 64 * 1024 * 1024  # the longest stretch without an event boundary
MAX_TIME_NS = 1 << 62  # a time's bound either way: ~146 years, and two of them fit in 64 bits

DEVICE_CATEGORIES = {"kernel": COMPUTATION, "gpu_memcpy": MEMORY, "gpu_memset": MEMORY}
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# Categories on the device side: a ProfilerStep#N among them is no host step.
_DEVICE_SIDE = frozenset({*DEVICE_CATEGORIES, "gpu_user_annotation", "cuda_sync"})

_NUM = rb"(-?[0-9][0-9.eE+-]*)"
_ID = rb'(?:-?\d+|"[^"]*")'
_TIMES = rb',\s*"pid":\s*' + _ID + rb',\s*"tid":\s*' + _ID
_TIMES += rb',\s*"ts":\s*' + _NUM + rb',\s*"dur":\s*' + _NUM
# Every device event and launch; the part after "cat" is optional, so that an event of
# interest not in PyTorch's layout still matches (with empty groups) and sends the text to
# the exact reading. Negated single characters ([^"], [^}]) keep the engine's inner loops
# fast; a name with an escaped quote does not match and is read exactly.
_EVENT_RE = re.compile(
    rb'"cat":\s*"(?:(kernel|gpu_memcpy|gpu_memset)"'
    rb'(?:,\s*"name":\s*"([^"]*)"' + _TIMES + rb',\s*"args":\s*\{'
    rb'[^}]*?"stream":\s*(-?\d+),\s*"correlation":\s*(-?\d+)([^}]*)\})?'
    rb'|cuda_(?:runtime|driver)"'
    rb'(?:,\s*"name":\s*"[^"]*"' + _TIMES + rb',\s*"args":\s*\{'
    rb'(?:[^}]*?"correlation":\s*(-?\d+))?[^}]*\})?)'
)
_STEP_RE = re.compile(rb'"cat":\s*"([^"]*)",\s*"name":\s*"ProfilerStep#(\d+)"' + _TIMES)
_GROUP_RE = re.compile(rb'"Process Group Name":\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
_SEQ_RE = re.compile(rb'"Seq":\s*(-?\d+)')
_BOUNDARY_RE = re.compile(rb'\}\s*,\s*(\{)\s*"[^"\\]*"\s*:')
_BOUNDARY_AFTER_RE = re.compile(rb'\{\s*"[^"\\]*"\s*:')
_BOUNDARY_BEFORE_RE = re.compile(rb"\}\s*,\s*\Z")
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_LIST_END_RE = re.compile(rb"\}\s*\]")
_SPACE_RE = re.compile(r"[\s,]*")

_HEAD, _EVENTS, _TAIL = 0, 1, 2


def ns(text: bytes) -> int:
    """A JSON number of microseconds as integer nanoseconds (rounded to the nearest ns).

    Raises ValueError for a text that is no number, AnalysisError for a time beyond
    ``MAX_TIME_NS`` either way (a start plus a duration must still fit the records' 64 bits).
    """
    try:
        value = int(text) * 1000
    except ValueError:
        value = _fraction_ns(text)
    if -MAX_TIME_NS <= value <= MAX_TIME_NS:
        return value
    raise AnalysisError(
        f"a time of {text[:40].decode('ascii', 'replace')} µs is beyond what the analysis "
        "holds (about 146 years either way)"
    )


def _fraction_ns(text: bytes) -> int:
    negative = text.startswith(b"-")
    whole, dot, fraction = text.lstrip(b"-").partition(b".")
    if dot and whole.isdigit() and fraction.isdigit():
        value = int(whole) * 1000 + int((fraction + b"000")[:3])
        if len(fraction) > 3 and fraction[3] >= ord("5"):
            value += 1
        return -value if negative else value
    try:
        return round(float(text) * 1000)
    except OverflowError:  # 1e400: infinite as a float
        return MAX_TIME_NS + 1


class _Number(str):
    """A float's JSON text, kept as text by the exact reading."""


_DECODER = json.JSONDecoder(parse_float=_Number)


class KinetoEvents:
    """Feeds ``collector`` from the bytes of one Kineto trace."""

    def __init__(self, collector: RankCollector) -> None:
        self.collector = collector
        self.exact_regions = 0  # texts the fast reading could not account for (a statistic)
        self._pending = b""  # the start of an event not yet whole
        self._state = _HEAD
        self._consumed = 0  # bytes read before the pending ones
        self._bare = False  # the document is a bare list of events
        self._tail = ""  # what followed the event list, read so far

    def feed(self, buf: bytes, end: int) -> None:
        """Take ``buf[:end]``, the next bytes of the trace."""
        start = 0
        if self._pending:
            first = _BOUNDARY_RE.search(buf, 0, end)
            if first is None:
                self._pending += buf[:end]
                if len(self._pending) > MAX_EVENT:
                    raise InspectionError(
                        f"malformed: no event boundary within {MAX_EVENT} bytes at byte "
                        f"{self._consumed}"
                    )
                return
            start = first.start(1)
            text, self._pending = self._pending + buf[:start], b""
            self._read(text, 0, len(text))
        cut = _last_boundary(buf, start, end)
        if cut <= start:
            self._pending = buf[start:end]
            return
        self._read(buf, start, cut)
        self._pending = buf[cut:end]

    def close(self) -> None:
        """The trace has ended: read what is left (exactly), and check that the document
        ends there: its event list closed, and nothing but whole members after it.

        Raises ``InspectionError`` for a truncated or malformed end.
        """
        text, self._pending = self._pending, b""
        start = self._events_start(text, 0, len(text)) if self._state == _HEAD else 0
        if self._state == _HEAD:
            raise InspectionError("malformed: the document holds no traceEvents list")
        if self._state == _TAIL:
            rest: str | None = self._tail + text.decode("utf-8", "replace")
        else:
            rest = self._exact(text, start, len(text), final=True)
        if rest is None:
            raise InspectionError(
                f"truncated: the trace ends after {self._consumed + len(text)} bytes, "
                "inside its traceEvents list"
            )
        if not _closed(rest, self._bare):
            raise InspectionError(
                "truncated or malformed: the document does not end properly after its "
                "traceEvents list"
            )

    def _read(self, text: bytes, lo: int, hi: int) -> None:
        """Read ``text[lo:hi]``, whole events only (after the event list: what follows it,
        kept for ``close`` to check)."""
        start = lo
        if self._state == _HEAD:
            start = self._events_start(text, lo, hi)
        if self._state == _TAIL:
            self._keep_tail(text[lo:hi].decode("utf-8", "replace"))
        elif not self._fast(text, start, hi):
            self.exact_regions += 1
            rest = self._exact(text, start, hi)
            if rest is not None:  # the event list ended inside the text
                self._keep_tail(rest)
        self._consumed += hi - lo

    def _keep_tail(self, text: str) -> None:
        self._tail += text
        if len(self._tail) > MAX_EVENT:
            raise InspectionError(
                f"malformed: more than {MAX_EVENT} bytes after the traceEvents list"
            )

    def _events_start(self, text: bytes, lo: int, hi: int) -> int:
        """Where the event list starts in ``text[lo:hi]``, or ``hi`` if not in it (yet)."""
        if self._consumed == 0 and text[lo:hi].lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
            self._state = _EVENTS
            self._bare = True
            return text.index(b"[", lo) + 1
        match = _EVENTS_KEY_RE.search(text, lo, hi)
        if match is None:
            return hi
        self._state = _EVENTS
        return match.end()

    def _fast(self, text: bytes, lo: int, hi: int) -> bool:
        """Read ``text[lo:hi]`` in PyTorch's layout; False (nothing taken) if it is not, or
        if the event list may end in it (an object closing a list: the exact reading finds
        where, and members after the list whose objects looked like events are not read)."""
        if _LIST_END_RE.search(text, lo, hi):
            return False
        found = _EVENT_RE.findall(text, lo, hi)
        if not all(row[2] if row[0] else row[7] for row in found):
            return False
        try:
            steps = _steps(text, lo, hi)
        except ValueError:
            return False
        if steps is None:
            return False
        try:
            devices, launches = _columns(found, self.collector)
        except ValueError:
            return False  # a number the fast reading cannot parse: the exact one will say
        self.collector.add_devices(devices)
        self.collector.add_launches(*launches)
        for step in steps:
            self.collector.add_step(*step)
        return True

    def _exact(self, text: bytes, lo: int, hi: int, *, final: bool = False) -> str | None:
        """Decode the events of ``text[lo:hi]`` one by one; the text after the list's
        closing ``]`` if it is there, else None. In the ``final`` text, an event the data
        ends inside is reported as a truncation."""
        if self._state != _EVENTS:
            return None
        doc = text[lo:hi].decode("utf-8", "replace")
        pos = _SPACE_RE.match(doc, 0).end()  # type: ignore[union-attr]
        while pos < len(doc):
            if doc[pos] == "]":
                self._state = _TAIL
                return doc[pos + 1 :]
            try:
                event, pos = _DECODER.raw_decode(doc, pos)
            except json.JSONDecodeError as exc:
                at = self._consumed + lo + len(doc[: exc.pos].encode("utf-8"))
                ending = doc.rstrip()
                if final and (ending[-1:] not in ("}", "]") or exc.pos >= len(ending) - 1):
                    raise InspectionError(
                        f"truncated: the trace ends inside an event after "
                        f"{self._consumed + hi - lo} bytes"
                    ) from None
                raise InspectionError(f"malformed JSON at byte {at}: {exc.msg}") from None
            if isinstance(event, dict):
                _take(event, self.collector)
            pos = _SPACE_RE.match(doc, pos).end()  # type: ignore[union-attr]
        return None


def _closed(rest: str, bare: bool) -> bool:
    """Whether ``rest``, what follows the event list, ends the document properly."""
    rest = rest.strip()
    if bare:
        return rest == ""
    if rest == "}":
        return True
    if not rest.startswith(","):
        return False
    try:
        json.loads("{" + rest[1:])
    except ValueError:
        return False
    return True


def _steps(text: bytes, lo: int, hi: int) -> list[tuple[int, int, int]] | None:
    """The host ``ProfilerStep#N`` of ``text[lo:hi]`` as ``(N, start, end)``; None when one
    is not in PyTorch's layout. Found from each occurrence of the name, not by a regular
    expression over every event."""
    steps = []
    pos = text.find(b'"ProfilerStep#', lo, hi)
    while pos >= 0:
        cat = text.rfind(b'"cat"', max(lo, pos - 1024), pos)
        match = _STEP_RE.match(text, cat, hi) if cat >= 0 else None
        if match is None or match.start(2) != pos + len(b'"ProfilerStep#'):
            return None
        category, number, ts, dur = match.groups()
        if category.decode("utf-8", "replace") not in _DEVICE_SIDE:
            start = ns(ts)
            steps.append((int(number), start, start + ns(dur)))
        pos = text.find(b'"ProfilerStep#', match.end(), hi)
    return steps


def _last_boundary(text: bytes, lo: int, hi: int) -> int:
    """The start of the last event in ``text[lo:hi]`` that follows another one, or ``lo``."""
    pos = text.rfind(b"{", lo, hi)
    while pos > lo:
        if _BOUNDARY_AFTER_RE.match(text, pos, hi) and _BOUNDARY_BEFORE_RE.search(
            text, max(lo, pos - 256), pos
        ):
            return pos
        pos = text.rfind(b"{", lo, pos)
    return lo


def _columns(
    found: list[tuple[bytes, ...]], collector: RankCollector
) -> tuple[list[list[int]], tuple[list[int], list[int]]]:
    """Device columns (``DEVICE_FIELDS`` order) and launch columns of fast matches."""
    launched = [row for row in found if not row[0] and row[9]]
    launches = (list(map(int, [row[9] for row in launched])), [ns(row[7]) for row in launched])
    names, groups = collector.names, collector.groups
    name_id, communication = names.raw_id, names.communication
    corr: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    streams: list[int] = []
    kinds: list[int] = []
    ids: list[int] = []
    group_ids: list[int] = []
    seqs: list[int] = []
    for cat, name, ts, dur, stream, correlation, tail, *_ in found:
        if not cat:
            continue
        start = ns(ts)
        starts.append(start)
        ends.append(start + ns(dur))
        streams.append(int(stream))
        corr.append(int(correlation))
        identity = name_id(name)
        ids.append(identity)
        if cat != b"kernel":
            kinds.append(MEMORY)
        elif communication[identity] or b'"Collective name"' in tail:
            kinds.append(COMMUNICATION)
            found_group = _GROUP_RE.search(tail)
            group_ids.append(NONE if found_group is None else groups.raw_id(found_group[1]))
            found_seq = _SEQ_RE.search(tail)
            seqs.append(NONE if found_seq is None else int(found_seq[1]))
            continue
        else:
            kinds.append(COMPUTATION)
        group_ids.append(NONE)
        seqs.append(NONE)
    return [corr, starts, ends, streams, kinds, ids, group_ids, seqs], launches


def _time(value: Any) -> int | None:
    """A decoded ``ts``/``dur`` as ns, or None if it is no number."""
    if isinstance(value, _Number):
        return ns(value.encode())
    if isinstance(value, int) and not isinstance(value, bool):
        return ns(str(value).encode())
    return None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _take(event: dict[str, Any], collector: RankCollector) -> None:
    """One decoded event, looked at whole."""
    if event.get("ph") != "X":
        return
    start, duration = _time(event.get("ts")), _time(event.get("dur"))
    if start is None or duration is None:
        return
    cat, name = event.get("cat"), event.get("name")
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    if isinstance(name, str) and name.startswith("ProfilerStep#") and cat not in _DEVICE_SIDE:
        number = name[len("ProfilerStep#") :]
        if number.isdigit():
            collector.add_step(int(number), start, start + duration)
    if cat in LAUNCH_CATEGORIES:
        correlation = _integer(args.get("correlation"))
        if correlation is not None:
            collector.add_launch(correlation, start)
        return
    if not isinstance(cat, str) or cat not in DEVICE_CATEGORIES:
        return
    stream = _integer(args.get("stream"))
    if stream is None:
        return
    name_id = collector.names.text_id(name if isinstance(name, str) else str(name))
    kind = DEVICE_CATEGORIES[cat]
    group, seq = NONE, NONE
    if kind == COMPUTATION and (
        collector.names.communication[name_id] or "Collective name" in args
    ):
        kind = COMMUNICATION
        if isinstance(args.get("Process Group Name"), str):
            group = collector.groups.text_id(args["Process Group Name"])
        recorded = _integer(args.get("Seq"))
        seq = NONE if recorded is None else recorded
    correlation = _integer(args.get("correlation"))
    collector.add_device(
        start,
        start + duration,
        stream,
        kind,
        name_id,
        NONE if correlation is None else correlation,
        group,
        seq,
    )


__all__ = ["AnalysisError", "KinetoEvents", "ns"]
