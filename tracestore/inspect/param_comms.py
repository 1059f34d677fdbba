"""The rank a process recorded in its ``record_param_comms`` rows (execution traces).

PyTorch's ``RECORD_PARAM_COMMS`` writes one row per collective call. Its inputs are, in the
layouts seen in the wild::

    [tensors, seq, [pg_name, pg_desc], rank, collective, in_split, out_split,
     global_rank_start, global_rank_stride, world_size]             schema 1.0.2 and later
    [tensors, seq, pg_ptr, rank, collective, in_split, out_split, group_size]   schema 1.0.1
    [tensors, seq, pg_ptr, rank, collective, in_split, out_split]    1.0.1, older PyTorch

(``wait`` rows have no tensors; Chakra's converter keeps the list as a Python literal.) The
``rank`` slot is the caller's rank *in that group*, except for rooted collectives
(broadcast, reduce, gather, scatter), where it is the root. So the file's rank is read from
unrooted rows on the default group (``pg_desc == "default_pg"``) when there are any, else on
the largest group recorded, mapped to a global rank through the group's start and stride
when they are recorded; a group-local rank on a smaller group never replaces it. Rows that
record no group size (the seven slots) are read last, on the group whose rank is highest:
a rank within a group (its members sorted, as ``new_group`` keeps them) is never above the
rank in the world. Kineto traces record the same call in a ``record_param_comms`` event's
``args`` (``kineto_comm_row``), read for a trace whose ``distributedInfo`` names no rank.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracestore.inspect.collectives import canonical, is_collective
from tracestore.inspect.model import Draft, ProcessGroup

ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
MAX_LITERAL = 1024 * 1024  # a converter's row longer than this is not parsed (literal_eval cost)


@dataclass(frozen=True)
class CommRow:
    """One ``record_param_comms`` row, as much of it as names a rank and a group."""

    node_id: int | None
    collective: str  # as recorded (``allreduce``, ``wait`` ...)
    rank: int
    group_name: str | None
    group_description: str | None
    group_size: int | None
    global_start: int | None = None
    global_stride: int | None = None
    listed_global: int | None = None  # the world rank a recorded member list gives

    @property
    def on_default_group(self) -> bool:
        """Whether the row is on the default process group (the whole world)."""
        return self.group_description == "default_pg"

    @property
    def global_rank(self) -> int:
        """The rank in the world: the group-local rank through the group's start and stride
        when the row records them, else the recorded rank."""
        if self.listed_global is not None:
            return self.listed_global
        if self.on_default_group or self.global_start is None or self.global_stride is None:
            return self.rank
        if self.global_start < 0 or self.global_stride < 1:
            return self.rank
        return self.global_start + self.global_stride * self.rank

    def group_text(self) -> str:
        """``process group "0" (default_pg, size 2)`` for provenance texts."""
        details = [self.group_description] if self.group_description else []
        if self.group_size is not None:
            details.append(f"size {self.group_size}")
        suffix = f" ({', '.join(details)})" if details else ""
        return f'process group "{self.group_name}"{suffix}'


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def comm_row(values: Any, node_id: int | None = None) -> CommRow | None:
    """The row in the ``inputs`` values of a ``record_param_comms`` node, or None when the
    values are not in a layout above (a string is read as the converter's Python literal)."""
    if isinstance(values, str):
        if len(values) > MAX_LITERAL:
            return None
        try:
            values = ast.literal_eval(values)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(values, list):
        return None
    for index in range(2, len(values)):
        name, rank = values[index], _int(values[index - 1])
        if not isinstance(name, str) or rank is None or rank < 0:
            continue
        group = values[index - 2]
        tail = values[index + 1 :]
        size = _int(tail[-1]) if tail else None
        start = stride = None
        if len(tail) >= 5:
            start, stride = _int(tail[-3]), _int(tail[-2])
        if isinstance(group, list) and group and all(isinstance(g, str) for g in group):
            group_name, description = group[0], group[1] if len(group) > 1 else None
        elif _int(group) is not None:
            group_name, description = str(group), None
        else:
            continue
        return CommRow(
            node_id=node_id,
            collective=name,
            rank=rank,
            group_name=group_name or None,
            group_description=description if description not in ("", "undefined") else None,
            group_size=size if size is not None and size >= 1 else None,
            global_start=start,
            global_stride=stride,
        )
    return None


MAX_LISTED_RANKS = 64 * 1024  # a Process Group Ranks text longer than this is not parsed


def _whole(value: Any) -> int | None:
    """An int, or a decimal text of one (Kineto writes some arguments as text)."""
    if isinstance(value, str) and value.isdecimal() and len(value) <= 10:
        return int(value)
    return _int(value)


def kineto_comm_row(args: Any) -> CommRow | None:
    """The row in a Kineto ``record_param_comms`` event's ``args`` (PyTorch's profiler writes
    ``Rank``, the caller's rank in the group, with ``Collective name``, ``Group size``,
    ``Process Group Name``/``Description`` and ``Process Group Ranks``, the members as text
    ``"[0, 1]"``, through which a group's rank maps to the world's), or None."""
    if not isinstance(args, dict):
        return None
    rank, name = _whole(args.get("Rank")), args.get("Collective name")
    if rank is None or rank < 0 or not isinstance(name, str):
        return None
    description = args.get("Process Group Description")
    group_name = args.get("Process Group Name")
    size = _whole(args.get("Group size"))
    members = args.get("Process Group Ranks")
    if isinstance(members, str) and len(members) <= MAX_LISTED_RANKS:
        try:
            members = json.loads(members)
        except ValueError:
            members = None
    listed = None
    if isinstance(members, list) and rank < len(members):
        listed = _int(members[rank])
    return CommRow(
        node_id=None,
        collective=name,
        rank=rank,
        group_name=str(group_name) if group_name not in (None, "") else None,
        group_description=description
        if isinstance(description, str) and description not in ("", "undefined")
        else None,
        group_size=size if size is not None and size >= 1 else None,
        global_start=_whole(args.get("Global rank start")),
        global_stride=_whole(args.get("Global rank stride")),
        listed_global=listed if listed is not None and listed >= 0 else None,
    )


@dataclass
class RankVote:
    """Collects the rows of one file and decides its rank, world size and process groups."""

    rows_on_default: list[CommRow] = field(default_factory=list)
    rows_by_size: dict[int, list[CommRow]] = field(default_factory=dict)
    rows_unsized: dict[str | None, list[CommRow]] = field(default_factory=dict)
    groups: dict[str, ProcessGroup] = field(default_factory=dict)

    def add(self, row: CommRow) -> None:
        """Count a row; rows whose rank slot is not the caller's are only listed as groups
        (``wait`` rows name no group of their own)."""
        if not is_collective(row.collective):
            return
        if row.group_name is not None and row.group_name not in self.groups:
            self.groups[row.group_name] = ProcessGroup(
                name=row.group_name, description=row.group_description, size=row.group_size
            )
        if canonical(row.collective) in ROOTED:
            return
        if row.on_default_group:
            self.rows_on_default.append(row)
        elif row.group_size is not None:
            self.rows_by_size.setdefault(row.group_size, []).append(row)
        else:
            self.rows_unsized.setdefault(row.group_name, []).append(row)

    @property
    def decided(self) -> bool:
        """True once a row on the default group is seen: later rows cannot change the rank."""
        return bool(self.rows_on_default)

    def store(self, draft: Draft, kind: str = "record_param_comms node") -> None:
        """Write the rank (with its provenance), world size and groups into ``draft``."""
        if self.rows_on_default:
            pool, why = self.rows_on_default, "the default group"
        elif self.rows_by_size:
            largest = max(self.rows_by_size)
            pool, why = self.rows_by_size[largest], "the largest group recorded"
        elif self.rows_unsized:
            pool = max(self.rows_unsized.values(), key=lambda rows: max(r.rank for r in rows))
            why = "the group of the highest rank, no group size recorded"
        else:
            pool, why = [], ""
        if not draft.process_groups:
            draft.process_groups = list(self.groups.values())
        if not pool:
            return
        votes = Counter(row.global_rank for row in pool)
        rank, count = votes.most_common(1)[0]
        first = next(row for row in pool if row.global_rank == rank)
        draft.rank = rank
        draft.rank_source = "record_param_comms"
        node = f" {first.node_id}" if first.node_id is not None else ""
        agreeing = f"{count} of {len(pool)} rows" if len(votes) > 1 else f"{count} rows"
        mapped = f" (global rank {rank})" if rank != first.rank else ""
        draft.rank_provenance = (
            f"{kind}{node}: rank {first.rank}{mapped} in {first.collective} on "
            f"{first.group_text()}, {why} ({agreeing})"
        )
        if draft.world_size is None and first.group_size is not None:
            draft.world_size = first.group_size
