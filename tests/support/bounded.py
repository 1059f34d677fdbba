"""A test's subject held to a memory bound it cannot pass by eating the machine.

``bounded_memory`` measures the Python heap a block allocates at its peak (tracemalloc), and
stops work that grows with a number instead of with bytes before it takes gigabytes from
everyone sharing the machine: in the test's own thread a trace function raises MemoryError
once the block holds more than its headroom (checked every few thousand lines, so a loop
appending to a list of every rank stops cleanly), and in every thread the process's address
space is capped a few times that above its size, so one huge allocation fails at once.
"""

from __future__ import annotations

import re
import resource
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

MIB = 1024 * 1024
_CHECK_EVERY = 4096  # trace events between looks at the heap


@dataclass
class Peak:
    """The most the block's Python allocations held at once, in bytes (set when it ends)."""

    bytes: int = 0

    @property
    def mib(self) -> float:
        return self.bytes / MIB


def _address_space() -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"VmSize:\s+(\d+) kB", status)
    assert match is not None, "no VmSize in /proc/self/status"
    return int(match[1]) * 1024


def _watchdog(start: int, headroom_mib: int) -> Any:
    """A ``sys.settrace`` function that raises MemoryError once the heap holds more than
    ``headroom_mib`` over ``start``. (Raising from it also ends the tracing.)"""
    seen = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal seen
        seen += 1
        if seen % _CHECK_EVERY == 0:
            held = tracemalloc.get_traced_memory()[0] - start
            if held > headroom_mib * MIB:
                raise MemoryError(f"held {held / MIB:.0f} MiB, past the {headroom_mib} MiB bound")
        return trace

    return trace


@contextmanager
def bounded_memory(headroom_mib: int) -> Iterator[Peak]:
    """Run the block allowed ``headroom_mib`` of heap (its peak measured into the yielded
    ``Peak``); MemoryError past it."""
    peak = Peak()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + 4 * headroom_mib * MIB
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    previous_trace = sys.gettrace()
    resource.setrlimit(
        resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard)
    )
    sys.settrace(_watchdog(start, headroom_mib))
    try:
        yield peak
    finally:
        sys.settrace(previous_trace)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        peak.bytes = max(0, tracemalloc.get_traced_memory()[1] - start)
        if not was_tracing:
            tracemalloc.stop()
