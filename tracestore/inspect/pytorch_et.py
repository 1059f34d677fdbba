"""PyTorch execution traces (``ExecutionTraceObserver`` JSON): one rank's host-side graph.

The document is ``{"schema": "1.1.1-chakra.0.0.4", "pid": ..., "time": ..., "start_ts": ...,
"nodes": [...], "finish_ts": ...}``. It records no rank; process groups appear as the inputs of
a ``## process_group:init ##`` node (a JSON string holding the ``pg_config`` list), and the
world size is taken from the default group's size.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracestore.inspect.jsonscan import (
    ChunkedScan,
    CollectiveScan,
    decode_value_at,
    number_pattern,
)
from tracestore.inspect.kineto import process_groups
from tracestore.inspect.model import Draft
from tracestore.inspect.streams import BinaryReader

_SCHEMA_RE = re.compile(rb'"schema"\s*:\s*"([^"\\]{0,200})"')
_PID_RE = number_pattern("pid")
_PG_INIT_RE = re.compile(rb'"## process_group:init ##"[^{}]{0,4096}?"inputs"\s*:\s*')


def scan(stream: BinaryReader, draft: Draft) -> None:
    """Fill ``draft`` from an execution trace."""
    chunks = ChunkedScan(stream, draft)
    comms = CollectiveScan()
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
            comms.feed(window.buf, end)
        chunks.check_closed("execution trace")
    finally:
        comms.store(draft)


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
