"""The process groups a traceset's files record, and the ``process_groups`` check.

Groups come from every file's ``processGroups`` (Kineto ``distributedInfo.pg_config``, the
execution trace's PG-init node or ``record_param_comms`` rows, the groups Chakra collectives
run on, an ASTRA-sim comm-group file). A run's group is one group whichever files record it
(each rank's, an execution trace and its Kineto twin): groups are merged by name and size,
keeping the members any file records and every file that records it (a group named
without a size, as Chakra traces name the groups they run on, joins the one group of known
size of that name). An empty or absent
member list of the default group (``pg_desc`` ``default_pg``; the execution trace writes
``"ranks": []``) means the whole world, so without a size it takes the file's world size.
Two groups of one name and size whose recorded members differ stay apart, as do unnamed
groups with different members.

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


Members = tuple[int, ...] | None
DEFAULT_GROUP = "default_pg"  # the pg_desc PyTorch gives the default group


def process_groups(files: Sequence[tuple[str, FileInspection]]) -> tuple[FoundGroup, ...]:
    """The distinct groups of known size the files record, largest first."""
    # (name, size) -> members (None: not recorded) -> the files (a dict as an ordered set)
    merged: dict[tuple[str | None, int], dict[Members, dict[str, None]]] = {}
    unsized: dict[str, dict[str, None]] = {}  # name -> files naming a group of unknown size
    order: dict[str, int] = {}
    for top, inspection in files:
        for label, leaf in inspection.leaves(top):
            order.setdefault(label, len(order))
            for group in leaf.process_groups:
                ranks = tuple(sorted(set(group.ranks))) if group.ranks else None
                size = len(ranks) if ranks else group.size
                if size is None and group.description == DEFAULT_GROUP:
                    size = leaf.world_size  # no members listed: the whole world
                if size is None and group.name is not None:
                    unsized.setdefault(group.name, {})[label] = None
                if not size or size < 1:
                    continue
                _same_group(merged.setdefault((group.name, size), {}), ranks)[label] = None
    # A Chakra trace names the groups it runs on, the comm-group file their members: when
    # one group of known size has the name, those traces record it too.
    by_name: dict[str, list[dict[str, None]]] = {}
    for (name, _), by_members in merged.items():
        if name in unsized:
            by_name.setdefault(name, []).extend(by_members.values())
    for name, named in by_name.items():
        if len(named) == 1:
            named[0].update(unsized[name])
    found = [
        FoundGroup(name, size, ranks, tuple(sorted(labels, key=order.__getitem__)))
        for (name, size), by_members in merged.items()
        for ranks, labels in by_members.items()
    ]
    return tuple(sorted(found, key=lambda g: (-g.size, g.name or "", g.ranks or ())))


def _same_group(by_members: dict[Members, dict[str, None]], ranks: Members) -> dict[str, None]:
    """The files of the group of one name and size that ``ranks`` belongs to: the one with
    those members, or any when either side's members are not recorded."""
    if ranks in by_members:
        return by_members[ranks]
    if ranks is None:
        return next(iter(by_members.values())) if by_members else by_members.setdefault(None, {})
    if None in by_members:  # first recorded members of a group known by name and size
        by_members[ranks] = by_members.pop(None)
        return by_members[ranks]
    return by_members.setdefault(ranks, {})


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
    # The default group stands for the groups of a degree only when that degree alone spans
    # the world (tp=4 of a 4-rank run); with other degrees above 1 its groups are smaller.
    spans_world = len(degrees) == 1 and world_size in degrees.values()
    for key, value in degrees.items():
        if value not in sizes and not spans_world:
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
