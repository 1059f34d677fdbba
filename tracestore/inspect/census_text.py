"""Short human texts for census messages: rank ranges and file lists, capped in length.

Rank sets are runs (``(start, end)``, inclusive) wherever a declared count bounds them: the
ranks missing of 2³¹−1 are one run, never a list of each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_FILES_SHOWN = 5
MAX_RANGES_SHOWN = 10


def intervals(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted ranks as inclusive ``(start, end)`` runs: ``0, 1, 2, 5`` → ``(0, 2), (5, 5)``."""
    runs: list[tuple[int, int]] = []
    for rank in ranks:
        if runs and rank <= runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], max(runs[-1][1], rank))
        else:
            runs.append((rank, rank))
    return runs


def gaps(ranks: Iterable[int], expected: int) -> list[tuple[int, int]]:
    """The runs of ``0..expected-1`` that the sorted ``ranks`` leave out, in work bounded by
    ``ranks``: ``0, 1, 5`` of 8 → ``(2, 4), (6, 7)``."""
    runs: list[tuple[int, int]] = []
    previous = -1
    for rank in ranks:
        if rank >= expected:
            break
        if rank > previous + 1:
            runs.append((previous + 1, rank - 1))
        previous = max(previous, rank)
    if expected > previous + 1:
        runs.append((previous + 1, expected - 1))
    return runs


def describe_ranks(runs: Sequence[tuple[int, int]]) -> str:
    """``0..3, 5, 7..9``, with ``and N more ranges`` past a limit."""
    shown = [str(a) if a == b else f"{a}..{b}" for a, b in runs[:MAX_RANGES_SHOWN]]
    more = len(runs) - MAX_RANGES_SHOWN
    return ", ".join(shown) + (f" and {more} more ranges" if more > 0 else "")


def describe_files(names: Sequence[str]) -> str:
    """``a.json, b.json``, with ``and N more`` past a limit."""
    shown = ", ".join(names[:MAX_FILES_SHOWN])
    more = len(names) - MAX_FILES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")
