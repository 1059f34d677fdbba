"""What this machine's memory does to a benchmark that writes new files, said in its output.

A virtual machine with free page reporting (virtio-balloon) hands memory it frees back to
its host; the next write into such memory takes a host fault per page. On the VMs these
figures come from, the kernel reports freed pages at once (``min_free_ms`` 0): writing
1 GiB into new files took 0.23 s when the memory had been freed a moment before and
3.7–7.1 s when it had been freed 5 s before, whatever the writer (``cp``, ``pwritev``,
``tracestore serve``). Both sides of an upload or download benchmark write new files, so
which one runs into reported memory decides its ratio more than either's code does.
Holding reporting back for the run (two of the kernel's parameters, as root) makes the
runs repeat; ``memory_note`` says whether it is needed, and how.
"""

from __future__ import annotations

import argparse
from pathlib import Path

PARAMETERS = Path("/sys/module/page_reporting/parameters")
# Held this long (and up to this much memory), freed pages outlast a benchmark's gaps.
HOLD_MS = 120_000
HOLD_MIB = 16_384


def _read(parameters: Path, name: str) -> int | None:
    try:
        return int((parameters / name).read_text().strip())
    except (OSError, ValueError):
        return None


def memory_note(parameters: Path = PARAMETERS) -> str | None:
    """One line for a benchmark's header when this guest reports freed memory to its host
    without delay (so its figures swing with the host's faults); None when it does not, or
    the kernel does not say."""
    delay, waiting = _read(parameters, "min_free_ms"), _read(parameters, "max_waiting_mib")
    if delay is None or (delay >= HOLD_MS and (waiting is None or waiting >= HOLD_MIB)):
        return None
    settings = f"echo {HOLD_MS} > {parameters}/min_free_ms"
    if waiting is not None:
        settings += f"; echo {HOLD_MIB} > {parameters}/max_waiting_mib"
    return (
        f"note: this guest reports freed memory to its host after {delay} ms, so a write into "
        "memory freed a moment earlier may take a host fault per page and these figures "
        f"swing run to run (bench/guest.py); for repeatable runs, as root: {settings} "
        "(restore the old values after)"
    )


if __name__ == "__main__":
    argparse.ArgumentParser(
        description="Whether this guest's memory makes the byte benchmarks swing."
    ).parse_args()
    print(memory_note() or "free page reporting: held back, or not reported by this kernel")
