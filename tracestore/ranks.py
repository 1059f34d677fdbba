"""Rank lists as people write them (``0-7,12``): parsed, merged and written back.

Used by the download route's ``ranks`` parameter, the client and ``tracestore download
--ranks``, so all three read a list the same way.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from tracestore.errors import ValidationError
from tracestore.metadata import MAX_RANK_COUNT

Runs = tuple[tuple[int, int], ...]
MAX_PIECES = 1024
_PIECE = re.compile(r"(\d{1,10})(?:-(\d{1,10}))?")
# What ``parse_ranks`` reads, as an OpenAPI description's pattern (a range that ends before
# it starts, a rank past the largest rank count and more than MAX_PIECES pieces it cannot say).
RANKS_PATTERN = r"^\s*\d{1,10}(-\d{1,10})?\s*(,\s*\d{1,10}(-\d{1,10})?\s*)*$"


def parse_ranks(text: str, name: str = "ranks", unit: str = "rank") -> Runs:
    """``"0-7,12"`` → ``((0, 7), (12, 12))``, sorted and merged; ValidationError naming the
    piece at fault otherwise. ``unit`` names what the numbers count (``step``: the same
    lists choose ProfilerStep numbers)."""
    pieces = [piece.strip() for piece in text.split(",")]
    if not text.strip() or len(pieces) > MAX_PIECES:
        raise ValidationError(
            f"{name} must list ranks and ranges such as 0-7,12 (at most {MAX_PIECES}); "
            f"got {text[:80]!r}"
        )
    runs: list[tuple[int, int]] = []
    for piece in pieces:
        match = _PIECE.fullmatch(piece)
        if match is None:
            raise ValidationError(
                f"{name}: {piece!r} is not a {unit} or a range such as 0-7 (in {text[:80]!r})"
            )
        start = int(match[1])
        end = int(match[2]) if match[2] is not None else start
        if end < start:
            raise ValidationError(f"{name}: the range {piece!r} ends before it starts")
        if end >= MAX_RANK_COUNT:
            if unit == "rank":
                raise ValidationError(f"{name}: rank {end} is beyond the largest rank count")
            raise ValidationError(f"{name}: {unit} {end} is beyond {MAX_RANK_COUNT - 1}")
        runs.append((start, end))
    return merge(runs)


def merge(runs: Iterable[tuple[int, int]]) -> Runs:
    """Sorted, overlapping or adjacent runs joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(runs):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return tuple(merged)


def ranks_text(runs: Runs) -> str:
    """``((0, 7), (12, 12))`` → ``"0-7,12"``."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def overlaps(runs: Runs, start: int, end: int) -> bool:
    """Does ``start..end`` hold any rank of ``runs``?"""
    return bool(within(runs, start, end))


def within(runs: Runs, start: int, end: int) -> Runs:
    """The ranks of ``runs`` (sorted and merged) that ``start..end`` holds, as runs; found by
    bisection, so the work grows with what is found, not with the runs or the ranks."""
    first = bisect_left(runs, start, key=lambda run: run[1])  # the first run ending in it
    past = bisect_right(runs, end, key=lambda run: run[0])  # the first run starting after it
    return tuple((max(a, start), min(b, end)) for a, b in runs[first:past])


def outside(runs: Runs, held: Runs) -> list[int]:
    """The first ranks of ``runs`` that no run of ``held`` covers (at most 5)."""
    missing: list[int] = []
    for a, b in runs:
        rank = a
        while rank <= b and len(missing) < 5:
            cover = next(((s, e) for s, e in held if s <= rank <= e), None)
            if cover is None:
                missing.append(rank)
                rank += 1
            else:
                rank = cover[1] + 1
    return missing


def select_files(
    files: Iterable[tuple[str, str, int | None, int | None]],
    runs: Runs,
    traceset_id: str,
    supporting: bool = False,
) -> list[str]:
    """The names, in order, of the files ``(name, role, rank_start, rank_end)`` a download
    of ``runs`` holds: the primary files whose ranks meet them, and the supporting files when
    ``supporting``. ValidationError naming any requested rank no file holds."""
    listed = list(files)
    ranked = [(name, start, end if end is not None else start) for name, role, start, end in
              listed if role == "primary" and start is not None]  # fmt: skip
    held = merge((start, end) for _, start, end in ranked)
    unknown = outside(runs, held)
    if unknown:
        holds = f"its files hold ranks {ranks_text(held)}" if held else "no file holds a rank"
        plural = "s" if len(unknown) > 1 else ""
        raise ValidationError(
            f"Unknown rank{plural} {', '.join(map(str, unknown))} for traceset "
            f"'{traceset_id}': {holds}"
        )
    chosen = {name for name, start, end in ranked if overlaps(runs, start, end)}
    return [
        name
        for name, role, _, _ in listed
        if name in chosen or (supporting and role == "supporting")
    ]


def sent_whole(
    files: Iterable[tuple[str, str, int | None, int | None]], runs: Runs
) -> list[tuple[str, str]]:
    """``(name, its ranks)`` of the primary files a download of ``runs`` holds that also hold
    ranks not asked for (an archive of every rank, a file of several): each is sent whole."""
    whole = []
    for name, role, start, end in files:
        if role != "primary" or start is None:
            continue
        end = start if end is None else end
        if within(runs, start, end) and within(runs, start, end) != ((start, end),):
            whole.append((name, ranks_text(((start, end),))))
    return whole
