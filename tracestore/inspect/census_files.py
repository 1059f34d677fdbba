"""What the census says about each primary file: its rank range, where that comes from, and
whether the traceset's only file is taken to hold every declared rank (one file: all)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracestore.inspect.model import ARCHIVE_FORMATS, TRACE_FORMATS, FileInspection
from tracestore.inspect.pairing import Pairing
from tracestore.ranks import merge


@dataclass(frozen=True)
class RankRange:
    """An inclusive range of ranks."""

    start: int
    end: int

    def to_json(self) -> dict[str, int]:
        """``{"start", "end"}``."""
        return {"start": self.start, "end": self.end}


def single_file_holds_all(
    files: Sequence[tuple[str, FileInspection]], declared: int | None, found: list[int]
) -> tuple[bool, str | None]:
    """Section 5.5: a traceset's only primary file covers every declared rank, so an opaque
    one (nothing inside names a rank) leaves no rank missing. ``(applies, why not)``: it
    does not apply to an archive of several traces (one per rank) nor to a trace that
    records a world size above 1 (one rank's trace of that world)."""
    if len(files) != 1 or declared is None or found:
        return False, None
    name, inspection = files[0]
    traces = list(_trace_leaves(name, inspection))
    if inspection.format in ARCHIVE_FORMATS and len(traces) > 1:
        return False, (
            f"{name} holds {len(traces)} trace files, each one rank's, not one file holding "
            f"all {declared} declared ranks, and none records its rank"
        )
    label, only = traces[0] if traces else (name, inspection)
    if only.world_size is not None and only.world_size > 1:
        return False, (
            f"{label} records world_size {only.world_size} but no rank: it is one rank's "
            f"trace, not a file holding all {declared} declared ranks"
        )
    return True, None


def _trace_leaves(label: str, inspection: FileInspection) -> Iterable[tuple[str, FileInspection]]:
    """The trace files in a file: itself, or the trace members of an archive (nested)."""
    if inspection.format in ARCHIVE_FORMATS:
        for member in inspection.members:
            yield from _trace_leaves(f"{label}:{member.name}", member)
    elif inspection.format in TRACE_FORMATS:
        yield label, inspection


def rank_ranges(
    files: Sequence[tuple[str, FileInspection]], declared: int | None, pairing: Pairing
) -> dict[str, RankRange | None]:
    """Each primary file's range of ranks (None for an archive with holes, or no rank)."""
    if len(files) == 1 and declared is not None:
        # Section 5.5: a traceset's only primary file covers every declared rank.
        return {files[0][0]: RankRange(0, declared - 1)}
    resolved = {f.file: rank for rank, held in pairing.by_rank.items() for f in held}
    return {
        name: _file_range(inspection)
        if inspection.format in ARCHIVE_FORMATS or name not in resolved
        else RankRange(resolved[name], resolved[name])
        for name, inspection in files
    }


def rank_provenance(
    files: Sequence[tuple[str, FileInspection]], pairing: Pairing, declared: int | None
) -> dict[str, str | None]:
    """Where each primary file's rank range comes from, in words."""
    told = {
        f.file: f.rank_provenance or f.rank_source for fs in pairing.by_rank.values() for f in fs
    }
    result: dict[str, str | None] = {}
    for name, inspection in files:
        if inspection.format not in ARCHIVE_FORMATS:
            result[name] = told.get(name)
            continue
        members = sorted(
            (label, told[label]) for label, _ in inspection.leaves(name) if label in told
        )
        shown = "; ".join(f"{label[len(name) + 1 :]}: {text}" for label, text in members[:3])
        more = f"; and {len(members) - 3} more members" if len(members) > 3 else ""
        result[name] = f"{len(members)} ranked members: {shown}{more}" if members else None
    if len(files) == 1 and declared is not None:
        # Section 5.5 gives the only primary file the declared range, whatever it records.
        name = files[0][0]
        inside = f"; it records {result[name]}" if result[name] else ""
        result[name] = (
            f"the only primary file, taken to hold all {declared} declared ranks "
            f"(0..{declared - 1}){inside}"
        )
    return result


def _file_range(inspection: FileInspection) -> RankRange | None:
    if inspection.format not in ARCHIVE_FORMATS:
        return None if inspection.rank is None else RankRange(inspection.rank, inspection.rank)
    runs = merge(
        (found.start, found.end)
        for member in inspection.members
        if (found := _file_range(member)) is not None
    )
    if len(runs) != 1:
        return None  # an archive with holes has no honest single range
    return RankRange(*runs[0])
