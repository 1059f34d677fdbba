"""PyTorch execution traces (``ExecutionTraceObserver`` JSON): one rank's host-side graph.

The document is ``{"schema": "1.1.1-chakra.0.0.4", "pid": ..., "time": ..., "start_ts": ...,
"nodes": [...], "finish_ts": ...}``. The rank is in the inputs of its ``record_param_comms``
nodes (read by ``param_comms``); process groups appear there and, when the observer wrote
one, as the inputs of a ``## process_group:init ##`` node (a JSON string holding the
``pg_config`` list), whose default group gives the world size.

In ``quick`` mode the scan stops as soon as a row on the default group has named the rank.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracestore.inspect.jsonscan import (
    ChunkedScan,
    CollectiveScan,
    Window,
    decode_value_at,
    number_pattern,
)
from tracestore.inspect.kineto import process_groups
from tracestore.inspect.model import Draft
from tracestore.inspect.param_comms import RankVote, comm_row
from tracestore.inspect.streams import BinaryReader

_SCHEMA_RE = re.compile(rb'"schema"\s*:\s*"([^"\\]{0,200})"')
_PID_RE = number_pattern("pid")
_PG_INIT_RE = re.compile(rb'"## process_group:init ##"[^{}]{0,4096}?"inputs"\s*:\s*')
# A record_param_comms node's inputs: {"values": [...], ...} (1.0.2+) or a bare list (1.0.1).
_COMMS_RE = re.compile(rb'"record_param_comms"[^{}]{0,4096}?"inputs"\s*:\s*')
_ID_RE = re.compile(rb'"id"\s*:\s*(\d+)')
ROW_FIRST_TRY = 4096  # a row's inputs are a few hundred bytes; rows come every few nodes


def scan(stream: BinaryReader, draft: Draft, *, quick: bool = False) -> None:
    """Fill ``draft`` from an execution trace."""
    if quick:
        draft.scan = "quick"
    chunks = ChunkedScan(stream, draft)
    comms = CollectiveScan()
    vote = RankVote()
    pg_found = False
    try:
        for window in chunks:
            end = window.end
            if window.offset == 0:
                if match := _SCHEMA_RE.search(window.buf, 0, end):
                    draft.schema_version = match[1].decode("utf-8", "replace")
                if match := _PID_RE.search(window.buf, 0, end):
                    draft.pid = int(float(match[1]))
            if not pg_found and (match := _PG_INIT_RE.search(window.buf, 0, end)):
                decoded = decode_value_at(window, match.end())
                if decoded is None:
                    chunks.hold(match.start())
                    end = match.start()
                else:
                    pg_found = True
                    _apply_pg_init(draft, decoded[0])
            end = _read_comm_rows(window, end, chunks, vote)
            comms.feed(window.buf, end)
            if quick and vote.decided:
                return
        chunks.check_closed("execution trace")
    finally:
        vote.store(draft)
        comms.store(draft)


def _read_comm_rows(window: Window, end: int, chunks: ChunkedScan, vote: RankVote) -> int:
    """Vote with every record_param_comms row of ``buf[:end]``; where to stop searching
    (a row that runs past the window is held for the next one)."""
    buf = window.buf
    pos = buf.find(b'"record_param_comms"', 0, end)
    while pos >= 0:
        match = _COMMS_RE.match(buf, pos, end)
        if match is not None:
            decoded = decode_value_at(window, match.end(), ROW_FIRST_TRY)
            if decoded is None:
                chunks.hold(pos)
                return pos
            inputs = decoded[0]
            values = inputs.get("values") if isinstance(inputs, dict) else inputs
            node_start = buf.rfind(b"{", 0, pos)
            found_id = _ID_RE.search(buf, max(node_start, 0), match.end())
            row = comm_row(values, int(found_id[1]) if found_id else None)
            if row is not None:
                vote.add(row)
        pos = buf.find(b'"record_param_comms"', pos + 1, end)
    return end


def _apply_pg_init(draft: Draft, inputs: Any) -> None:
    values = inputs.get("values") if isinstance(inputs, dict) else None
    if not isinstance(values, list) or not values:
        return
    config = values[0]
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return
    while isinstance(config, list) and len(config) == 1 and isinstance(config[0], list):
        config = config[0]
    draft.process_groups = process_groups(config)
    for group in draft.process_groups:
        if group.description == "default_pg" or (group.name == "0" and draft.world_size is None):
            draft.world_size = group.size
    if draft.process_groups and draft.backend is None:
        backend = draft.process_groups[0].backend
        draft.backend = backend.split(":")[-1] if backend else None
