"""The process groups a traceset's files record, and the ``process_groups`` check.

Groups come from every file's ``processGroups`` (Kineto ``distributedInfo.pg_config``, the
execution trace's PG-init node or ``record_param_comms`` rows, the groups Chakra collectives
run on, an ASTRA-sim comm-group file). One group recorded by several ranks' files is one
group: groups are merged by their member ranks when recorded, else by name and size.

The check holds the declared ``workloadMetadata.parallelism`` degrees (``tp``, ``pp``, ``dp``,
``ep``, ``cp``, ``sp``) against the group sizes found. When only some of the ranks were
captured the files cannot show every group, so its problems are warnings (it passes with
``warning`` set) rather than failures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracestore.inspect.model import CensusCheck, FileInspection

# The degrees a declaration may give, in the order messages name them.
GROUP_DEGREES: tuple[str, ...] = ("tp", "pp", "dp", "ep", "cp", "sp")


@dataclass(frozen=True)
class FoundGroup:
    """One process group as the set records it, with the files that record it."""

    name: str | None
    size: int
    ranks: tuple[int, ...] | None
    files: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"name", "size", "ranks", "files"}``."""
        return {
            "name": self.name,
            "size": self.size,
            "ranks": None if self.ranks is None else list(self.ranks),
            "files": list(self.files),
        }


def process_groups(files: Sequence[tuple[str, FileInspection]]) -> tuple[FoundGroup, ...]:
    """The distinct groups of known size the files record, largest first."""
    # The files of each group as a dict (an ordered set): a group recorded by every member of
    # a large archive must not cost a scan of its files per member.
    merged: dict[tuple[Any, ...], tuple[str | None, int, tuple[int, ...] | None, dict[str, None]]]
    merged = {}
    for top, inspection in files:
        for label, leaf in inspection.leaves(top):
            for group in leaf.process_groups:
                ranks = tuple(sorted(set(group.ranks))) if group.ranks else None
                size = len(ranks) if ranks else group.size
                if not size or size < 1:
                    continue
                key: tuple[Any, ...] = ("ranks", ranks) if ranks else ("name", group.name, size)
                if key not in merged:
                    merged[key] = (group.name, size, ranks, {})
                merged[key][3][label] = None
    found = [FoundGroup(n, s, r, tuple(f)) for n, s, r, f in merged.values()]
    return tuple(sorted(found, key=lambda g: (-g.size, g.name or "", g.ranks or ())))


def parallelism_values(workload_metadata: object, keys: Sequence[str]) -> dict[str, int]:
    """The degrees ``keys`` given in ``workloadMetadata.parallelism`` (integers ≥ 1)."""
    if not isinstance(workload_metadata, Mapping):
        return {}
    parallelism = workload_metadata.get("parallelism")
    if not isinstance(parallelism, Mapping):
        return {}
    return {
        key: value
        for key in keys
        if isinstance(value := parallelism.get(key), int)
        and not isinstance(value, bool)
        and value >= 1
    }


def declared_degrees(workload_metadata: object) -> dict[str, int]:
    """The degrees of ``workloadMetadata.parallelism`` that need a group (integers above 1)."""
    found = parallelism_values(workload_metadata, GROUP_DEGREES)
    return {key: value for key, value in found.items() if value > 1}


def _partitions(groups: Sequence[FoundGroup], world: int) -> bool:
    """Do ``groups`` (of one size) split ranks 0..world-1 evenly (each rank in as many of
    them, as when they are the groups of one parallelism dimension, or of two of size)?
    The work is their members', whatever ``world`` says."""
    counts: dict[int, int] = {}
    for group in groups:
        for rank in group.ranks or ():
            counts[rank] = counts.get(rank, 0) + 1
    # ``world`` distinct ranks, none outside 0..world-1, are every one of them.
    covered = len(counts) == world and min(counts) == 0 and max(counts) == world - 1
    return covered and len(set(counts.values())) == 1


def _sizes_text(groups: Sequence[FoundGroup]) -> str:
    counts: dict[int, int] = {}
    for group in groups:
        counts[group.size] = counts.get(group.size, 0) + 1
    return ", ".join(f"{n} of size {size}" for size, n in sorted(counts.items()))


def process_group_check(
    groups: Sequence[FoundGroup],
    workload_metadata: object,
    *,
    world_size: int | None,
    ranks_found: int,
) -> CensusCheck:
    """Declared degrees against the group sizes; ``world_size`` is the census's expected rank
    count and ``ranks_found`` how many ranks the files hold (fewer: problems are warnings)."""
    degrees = declared_degrees(workload_metadata)
    declared_text = ", ".join(f"{k}={v}" for k, v in degrees.items())
    if not groups:
        if degrees:
            return CensusCheck(
                True,
                f"no process groups recorded in the files; declared {declared_text} not checked",
            )
        return CensusCheck(True, "no process groups recorded and no parallelism degrees declared")
    summary = f"{len(groups)} process groups recorded ({_sizes_text(groups)})"
    if not degrees:
        return CensusCheck(True, f"{summary}; no parallelism degrees declared to check")
    sizes = {g.size for g in groups}
    problems: list[str] = []
    for key, value in degrees.items():
        if value not in sizes and value != world_size:
            found = ", ".join(str(s) for s in sorted(sizes))
            problems.append(
                f"declared {key}={value}, but no process group of size {value} "
                f"(group sizes recorded: {found})"
            )
    undeclared = [k for k in GROUP_DEGREES[:5] if k not in degrees]
    by_size: dict[int, list[FoundGroup]] = {}  # each size's groups, read once for them all
    for group in groups:
        by_size.setdefault(group.size, []).append(group)
    for size in sorted(sizes):
        if size <= 1 or size in degrees.values() or world_size is None or size >= world_size:
            continue
        if _partitions(by_size[size], world_size):
            guess = " or ".join((undeclared or list(degrees))[:2])
            problems.append(
                f"groups of size {size} partition {world_size} ranks, but no declared degree "
                f"is {size}: {guess} of {size}?"
            )
    if not problems:
        return CensusCheck(True, f"declared {declared_text} each match process groups: {summary}")
    subset = world_size is not None and ranks_found < world_size
    if subset:
        return CensusCheck(
            True,
            f"only {ranks_found} of {world_size} ranks were captured, so groups may be "
            f"missing: {'; '.join(problems)}",
            warning=True,
        )
    return CensusCheck(False, "; ".join(problems))
