"""Keeping glibc's heap warm for request bodies, and the collector off the startup heap.

Receiving a part allocates one buffer per socket read (256 KiB from uvloop) and frees it
a moment later. With glibc's defaults those buffers come from the top of the heap, which
is handed back to the kernel (``brk``) when freed and faulted in again, zero-filled, on
the next read: measured here, that churn tripled the CPU a process spent receiving bytes
(4.4 s → 1.5 s for 2 GiB through uvicorn). Serving buffers up to 4 MiB from the heap and
keeping up to 64 MiB of freed heap avoids it, at the cost of that much retained memory.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys

log = logging.getLogger("tracestore.heap")

# glibc's mallopt(3) parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_heap_warm() -> bool:
    """Tune this process's allocator for streaming bodies; False where that is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it; musl's mallopt is a no-op)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done: bool = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    done = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and done
    if not done:
        log.info("mallopt refused the heap settings; receiving parts costs more CPU")
    return done


def freeze_startup_heap() -> None:
    """Take every object alive once a served process has started (its modules, the app, its
    routes and models, the engines) out of the cyclic collector's sight (``gc.freeze``):
    each full collection walked them all again, ~3 % of a list page's CPU served
    (bench/load.py; docs/benchmarks-journal.md). Objects made afterwards are collected as before;
    the frozen ones live as long as the process anyway."""
    gc.collect()
    gc.freeze()
