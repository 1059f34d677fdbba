"""PyTorch profiler (Kineto) Chrome-trace JSON: one rank's timeline.

The rank lives in the top-level ``distributedInfo`` object (``rank``, ``world_size``,
``backend``, ``pg_config``), which PyTorch writes before ``traceEvents`` but other writers put
after it; the one-pass scan finds it in either place. ``quick`` mode stops as soon as
``distributedInfo`` is read, and on a seekable file looks at the tail before reading the
whole event list in search of it. The process id is the ``pid`` of the first host-side event
(CPU ops, annotations, runtime calls); GPU events carry the device as theirs. A trace whose
``distributedInfo`` names no rank (or that has none) takes the rank its ``record_param_comms``
events record (``Rank`` in their ``args``), else the one a profiler's file name holds
(``worker1.<ts>.pt.trace.json``, ``rank3.kineto.json``; not a bare ``rank_0.json``), each with
its provenance.
"""

from __future__ import annotations

import json
import re
from typing import IO, Any, cast

from tracestore.inspect.jsonscan import (
    ChunkedScan,
    CollectiveScan,
    Tap,
    TimeSpanScan,
    Window,
    decode_value_at,
    find_key,
    key_pattern,
    number_pattern,
)
from tracestore.inspect.model import Draft, InspectionError, ProcessGroup
from tracestore.inspect.param_comms import RankVote, kineto_comm_row
from tracestore.inspect.streams import BinaryReader

QUICK_CHUNK_SIZE = 1024 * 1024
# The most record_param_comms events read for a rank: a row on the default group decides it.
MAX_COMM_ROWS = 4096
TAIL_SIZE = 8 * 1024 * 1024

_INFO_RE = key_pattern("distributedInfo")
_SCHEMA_RE = number_pattern("schemaVersion")
_BASE_TIME_RE = number_pattern("baseTimeNanoseconds")
_DEVICES_RE = key_pattern("deviceProperties")
_COMM_ARGS_RE = re.compile(rb'"record_param_comms"[^{}]{0,4096}?"args"\s*:\s*(\{[^{}]{0,16384}\})')
# A profiler's trace name holding the rank: worker1.<ts>.pt.trace.json, rank3.kineto.json,
# eg.rank_0.pt.trace.json (the digits end at a dot: worker-0_4242 is a host and a process).
# Only a name the profiler's writers give (.pt.trace.json, kineto): a bare rank_0.json may
# hold every rank (an only file holds all the declared ones).
_RANK_NAME_RE = re.compile(r"(?:^|[._-])(?:rank|worker)[-_]?(\d{1,9})\.", re.IGNORECASE)
_PROFILER_NAME_RE = re.compile(r"\.pt\.trace\.json|kineto", re.IGNORECASE)
_STEP_RE = re.compile(rb'"name"\s*:\s*"ProfilerStep#(\d{1,12})"')
# The CPU process id: the pid of host-side events (GPU events use the device as their pid).
_HOST_CATEGORIES = rb'"(?:cpu_op|user_annotation|python_function|cuda_runtime|cuda_driver)"'
_HOST_PID_RE = re.compile(
    rb'"cat"\s*:\s*' + _HOST_CATEGORIES + rb'[^{}]{0,4096}?"pid"\s*:\s*(\d+)'
    rb'|"pid"\s*:\s*(\d+)[^{}]{0,4096}?"cat"\s*:\s*' + _HOST_CATEGORIES
)


def scan(
    stream: BinaryReader,
    draft: Draft,
    *,
    quick: bool = False,
    seekable: bool = False,
    tap: Tap | None = None,
) -> None:
    """Fill ``draft`` from a Kineto trace; ``seekable`` allows the quick tail look-up.
    A full scan hands ``tap`` every byte once, in order (a window the scan holds back for
    ``distributedInfo`` comes round again: its bytes are not handed twice)."""
    comms = CommRanks()
    if quick:
        draft.scan = "quick"
        try:
            _quick_scan(stream, draft, seekable, comms)
        finally:
            rank_without_info(draft, comms)
        return
    chunks = ChunkedScan(stream, draft)
    times = TimeSpanScan()
    collectives = CollectiveScan()
    info_found = False
    base_ns: int | None = None
    steps: set[bytes] = set()
    tapped = 0  # the stream offset up to which tap has had the bytes
    try:
        for window in chunks:
            if tap is not None:
                tapped = _hand_on(tap, window, tapped)
            end = window.end
            if not info_found:
                info_found, held = _read_info(window, chunks, draft)
                end = window.end if held is None else held
            if draft.schema_version is None and window.offset == 0:
                match = _SCHEMA_RE.search(window.buf, 0, end)
                if match:
                    draft.schema_version = match[1].decode()
            if window.offset == 0:
                gpu_models(window, end, draft)
            if b"ProfilerStep#" in window.buf:
                steps.update(_STEP_RE.findall(window.buf, 0, end))
            if draft.pid is None:
                host_pid(window.buf, end, draft)
            if base_ns is None and (match := find_key(_BASE_TIME_RE, window.buf, end)):
                text = match[1]
                base_ns = int(text) if text.isdigit() else int(float(text))
            times.feed(window.buf, end)
            collectives.feed(window.buf, end)
            comms.feed(window.buf, end)
        chunks.check_closed("Kineto")
    finally:
        base_us = 0 if not base_ns else base_ns / 1000 if base_ns % 1000 else base_ns // 1000
        draft.time_span = times.result(base_us)
        collectives.store(draft)
        draft.profiler_steps = len(steps) if steps else None
        rank_without_info(draft, comms)


class CommRanks:
    """The rank votes of a trace's ``record_param_comms`` events (``param_comms``)."""

    def __init__(self) -> None:
        self.vote = RankVote()
        self.rows = 0

    @property
    def done(self) -> bool:
        return self.vote.decided or self.rows >= MAX_COMM_ROWS

    def feed(self, buf: bytes, end: int) -> None:
        """Vote with the events of ``buf[:end]`` (an event cut by the window is skipped)."""
        if self.done or buf.find(b"record_param_comms", 0, end) < 0:
            return
        for match in _COMM_ARGS_RE.finditer(buf, 0, end):
            try:
                row = kineto_comm_row(json.loads(match[1]))
            except ValueError:
                continue
            if row is not None:
                self.vote.add(row)
                self.rows += 1
            if self.done:
                return


def rank_without_info(draft: Draft, comms: CommRanks) -> None:
    """A trace whose ``distributedInfo`` names no rank: the rank its ``record_param_comms``
    events record, else the one its conventional file name holds."""
    if draft.rank is not None:
        return
    comms.vote.store(draft, kind="record_param_comms event")
    if draft.rank is not None:
        return
    base = draft.name.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    match = _RANK_NAME_RE.search(base) if _PROFILER_NAME_RE.search(base) else None
    if match is None:
        return
    draft.rank = int(match[1])
    draft.rank_source = "memberName" if draft.nested else "filename"
    what = "archive member name" if draft.nested else "file name"
    draft.rank_provenance = f"{what} {draft.name} (rank<N> or worker<N> in the name)"


def _hand_on(tap: Tap, window: Window, tapped: int) -> int:
    """Hand ``tap`` the window's bytes it has not had; the offset it has had them up to."""
    skip = tapped - window.offset
    if skip <= 0:
        tap(window.buf, window.end)
    elif skip < window.end:  # rare: a held window came round again
        tap(window.buf[skip : window.end], window.end - skip)
    return max(tapped, window.offset + window.end)


def gpu_models(window: Window, end: int, draft: Draft) -> None:
    """The distinct device names of a ``deviceProperties`` list in ``window.buf[:end]``
    (PyTorch writes it near the top; one that runs past the first window is left out)."""
    match = find_key(_DEVICES_RE, window.buf, end)
    if match is None:
        return
    try:
        decoded = decode_value_at(window, match.end())
    except InspectionError:  # a malformed list is no reason to fail the timeline
        return
    if decoded is None or not isinstance(decoded[0], list):
        return
    names = dict.fromkeys(draft.gpu_models)  # an ordered set: one look-up per device
    for device in decoded[0]:
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, str) and name.strip():
            names[name.strip()] = None
    draft.gpu_models = list(names)


def host_pid(buf: bytes, end: int, draft: Draft) -> None:
    """Set ``draft.pid`` from the first host-side event of ``buf[:end]``, if any."""
    if match := _HOST_PID_RE.search(buf, 0, end):
        draft.pid = int(match[1] or match[2])


def _read_info(window: Window, chunks: ChunkedScan, draft: Draft) -> tuple[bool, int | None]:
    """Look for distributedInfo in the window: ``(read, held)``.

    ``held`` is the position where it starts when it runs past the window: the scan holds
    ``buf[held:]`` for the next window and must search only ``buf[:held]`` now.
    """
    match = find_key(_INFO_RE, window.buf, window.end)
    if match is None:
        return False, None
    decoded = decode_value_at(window, match.end())
    if decoded is None:
        chunks.hold(match.start())
        return False, match.start()
    apply_distributed_info(draft, decoded[0])
    return True, None


def apply_distributed_info(draft: Draft, info: Any) -> None:
    """Take rank, world size, backend and process groups from a ``distributedInfo`` value."""
    if not isinstance(info, dict):
        return
    rank = info.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        draft.rank = rank
        draft.rank_source = "distributedInfo"
        shown = {k: info[k] for k in ("rank", "world_size") if k in info}
        draft.rank_provenance = f"distributedInfo {json.dumps(shown)}"
    world = info.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world >= 1:
        draft.world_size = world
    if isinstance(info.get("backend"), str):
        draft.backend = info["backend"]
    version = info.get("nccl_version")
    if isinstance(version, str | int) and not isinstance(version, bool) and str(version):
        draft.nccl_version = str(version)
    draft.process_groups = process_groups(info.get("pg_config"))


def process_groups(config: Any) -> list[ProcessGroup]:
    """Process groups from a ``pg_config`` value (a list of objects, or an object of them)."""
    if isinstance(config, dict):
        items = list(config.values())
    elif isinstance(config, list):
        items = config
    else:
        return []
    groups = []
    for item in items:
        if not isinstance(item, dict):
            continue
        size = item.get("pg_size", item.get("group_size"))
        ranks = item.get("ranks")
        listed = isinstance(ranks, list) and bool(ranks) and all(_rank(r) for r in ranks)
        groups.append(
            ProcessGroup(
                name=_text(item.get("pg_name")),
                description=_text(item.get("pg_desc")),
                backend=_text(item.get("backend_config")),
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                ranks=tuple(ranks) if listed and isinstance(ranks, list) else None,
            )
        )
    return groups


def _rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _quick_scan(stream: BinaryReader, draft: Draft, seekable: bool, comms: CommRanks) -> None:
    chunks = ChunkedScan(stream, draft, QUICK_CHUNK_SIZE)
    tail_tried = False
    for window in chunks:
        if window.offset == 0:
            gpu_models(window, window.end, draft)
        if draft.pid is None:
            host_pid(window.buf, window.end, draft)
        if _read_info(window, chunks, draft)[0] and draft.rank is not None:
            return
        comms.feed(window.buf, window.end)
        if comms.vote.decided:
            return
        if seekable and not tail_tried and b'"traceEvents"' in window.buf:
            tail_tried = True
            if _tail_has_info(cast(IO[bytes], stream), draft):
                return


def _tail_has_info(stream: IO[bytes], draft: Draft) -> bool:
    """Read distributedInfo from the last ``TAIL_SIZE`` bytes, then seek back."""
    here = stream.tell()
    size = stream.seek(0, 2)
    if size - here <= 0:
        stream.seek(here)
        return False
    stream.seek(max(here, size - TAIL_SIZE))
    try:
        tail = ChunkedScan(stream, draft, QUICK_CHUNK_SIZE)
        return any(_read_info(window, tail, draft)[0] for window in tail)
    finally:
        stream.seek(here)
