"""What inspecting one trace file finds: ``FileInspection`` and its parts.

``FileInspection`` is immutable and JSON-safe through ``to_json`` (camelCase members, the
shape of the HTTP API) and ``from_json`` (so the server can store a result and read it back).
Scanners fill a mutable ``Draft`` and freeze it once they are done, or once they fail: a file
that breaks off half-way still reports what was found before the break.

Every number an inspection holds is finite and within what the service stores: ``freeze``
leaves out a rank, world size, process group or pid beyond ``MAX_RANK_COUNT`` or 64 bits
and a time beyond a double or ``MAX_TIME_US``, and fails the file naming it (only that
file: a rank of 10^30 would overflow the database's 64-bit column for the whole traceset,
and ``"ts": 1e400`` would store ``Infinity``, which is no JSON); a non-finite attribute is
given as its name (``NaN``, ``Infinity``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

# The seed's bound on a rank count, ``metadata.MAX_RANK_COUNT`` (metadata imports pydantic,
# which a reader of one format need not load; tests/test_inspect_extremes.py holds them equal).
MAX_RANK_COUNT = 2_147_483_647

Format = Literal[
    "kineto_json",
    "pytorch_et_json",
    "chakra_et",
    "chakra_json",
    "comm_groups",
    "zip",
    "tar",
    "unknown",
]
Compression = Literal["gzip", "zstd", "bzip2", "xz"]
Status = Literal["complete", "failed"]
RankSource = Literal["distributedInfo", "record_param_comms", "filename", "memberName", "pid"]
AttributeValue = str | int | float | bool
Scan = Literal["full", "quick"]

FORMATS: tuple[Format, ...] = get_args(Format)
TRACE_FORMATS: frozenset[str] = frozenset(
    {"kineto_json", "pytorch_et_json", "chakra_et", "chakra_json"}
)
ARCHIVE_FORMATS: frozenset[str] = frozenset({"zip", "tar"})

Number = int | float
MAX_TIME_US = 2**63  # microseconds either way of 0: durations between two stay finite
MAX_PID = 2**63 - 1


@dataclass(frozen=True)
class TimeSpan:
    """First and last instant a trace covers, in microseconds (as the trace records them)."""

    start_us: Number
    end_us: Number

    def to_json(self) -> dict[str, Any]:
        """``{"startUs", "endUs", "durationUs"}``."""
        return {
            "startUs": self.start_us,
            "endUs": self.end_us,
            "durationUs": self.end_us - self.start_us,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimeSpan:
        """Inverse of ``to_json``."""
        return cls(start_us=data["startUs"], end_us=data["endUs"])


@dataclass(frozen=True)
class CensusCheck:
    """The outcome of one check of a traceset's files and a message a person can act on;
    ``warning`` marks a pass that still names something to look at."""

    passed: bool
    message: str
    warning: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"passed", "message", "warning"}``."""
        return {"passed": self.passed, "message": self.message, "warning": self.warning}


@dataclass(frozen=True)
class ProcessGroup:
    """One process group a trace records (Kineto ``pg_config``, execution-trace PG init,
    record_param_comms rows, Chakra ``pg_name`` attributes, an ASTRA-sim comm-group file).

    ``ranks`` are its members where recorded; ``collectives`` counts the collectives a Chakra
    trace runs on it (canonical names).
    """

    name: str | None
    description: str | None = None
    backend: str | None = None
    size: int | None = None
    ranks: tuple[int, ...] | None = None
    collectives: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"name", "description", "backend", "size", "ranks", "collectives"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "backend": self.backend,
            "size": self.size,
            "ranks": None if self.ranks is None else list(self.ranks),
            "collectives": dict(self.collectives),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessGroup:
        """Inverse of ``to_json``."""
        return cls(
            name=data.get("name"),
            description=data.get("description"),
            backend=data.get("backend"),
            size=data.get("size"),
            ranks=None if data.get("ranks") is None else tuple(data["ranks"]),
            collectives=dict(data.get("collectives") or {}),
        )


@dataclass(frozen=True)
class FileInspection:
    """What inspection derived from one file (or one member of an archive).

    ``rank`` is ``None`` whenever the file does not establish it; it is never assumed to be 0.
    ``collectives`` maps a canonical collective name (``all_reduce``, ``all_to_all`` ...) to the
    number of calls; ``collective_events`` maps the raw event names it was derived from
    (``record_param_comms``, ``nccl:all_reduce``, NCCL kernel names without their signature) to
    their counts. ``collective_bytes`` (Chakra) sums ``comm_size`` per collective.
    ``rank_source`` says which kind of record gave the rank and ``rank_provenance`` where
    exactly (the node, the name pattern) in words; ``attributes`` holds the scalar attributes
    of a Chakra ``GlobalMetadata`` (``schema``, ``pid``, ``ngpus`` ...).
    ``gpu_models`` are the distinct device names of a Kineto ``deviceProperties``,
    ``nccl_version`` the version ``distributedInfo`` records, ``profiler_steps`` how many
    distinct ``ProfilerStep#N`` spans the timeline holds.
    ``status`` is ``failed`` when the file could not be read to its end; ``reason`` then says
    why, and the other members keep whatever was found before the failure.
    """

    name: str
    format: Format = "unknown"
    status: Status = "complete"
    reason: str | None = None
    compression: Compression | None = None
    scan: Scan = "full"
    rank: int | None = None
    world_size: int | None = None
    rank_source: RankSource | None = None
    rank_provenance: str | None = None
    backend: str | None = None
    time_span: TimeSpan | None = None
    collectives: Mapping[str, int] = field(default_factory=dict)
    collective_events: Mapping[str, int] = field(default_factory=dict)
    collective_bytes: Mapping[str, int] = field(default_factory=dict)
    node_counts: Mapping[str, int] = field(default_factory=dict)
    schema_version: str | None = None
    pid: int | None = None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    process_groups: tuple[ProcessGroup, ...] = ()
    members: tuple[FileInspection, ...] = ()
    bytes_scanned: int = 0
    gpu_models: tuple[str, ...] = ()
    nccl_version: str | None = None
    profiler_steps: int | None = None

    def leaves(self, label: str) -> Iterator[tuple[str, FileInspection]]:
        """This file, or for an archive every member (recursively), as ``(label,
        inspection)``; a member's label is ``archive:member``, as the census names it."""
        if self.format in ARCHIVE_FORMATS:
            for member in self.members:
                yield from member.leaves(f"{label}:{member.name}")
        else:
            yield label, self

    def to_json(self) -> dict[str, Any]:
        """The camelCase, JSON-safe form used by the HTTP API and the CLI's ``--json``."""
        return {
            "name": self.name,
            "format": self.format,
            "compression": self.compression,
            "status": self.status,
            "reason": self.reason,
            "scan": self.scan,
            "rank": self.rank,
            "worldSize": self.world_size,
            "rankSource": self.rank_source,
            "rankProvenance": self.rank_provenance,
            "backend": self.backend,
            "timeSpan": self.time_span.to_json() if self.time_span else None,
            "collectives": dict(self.collectives),
            "collectiveEvents": dict(self.collective_events),
            "collectiveBytes": dict(self.collective_bytes),
            "nodeCounts": dict(self.node_counts),
            "schemaVersion": self.schema_version,
            "pid": self.pid,
            "attributes": dict(self.attributes),
            "processGroups": [pg.to_json() for pg in self.process_groups],
            "members": [m.to_json() for m in self.members],
            "bytesScanned": self.bytes_scanned,
            "gpuModels": list(self.gpu_models),
            "ncclVersion": self.nccl_version,
            "profilerSteps": self.profiler_steps,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileInspection:
        """Rebuild an inspection from ``to_json`` output (e.g. as stored by the server)."""
        span = data.get("timeSpan")
        fmt = data.get("format", "unknown")
        return cls(
            name=data["name"],
            format=cast(Format, fmt if fmt in FORMATS else "unknown"),
            status=cast(Status, data.get("status", "complete")),
            reason=data.get("reason"),
            compression=data.get("compression"),
            scan=cast(Scan, data.get("scan", "full")),
            rank=data.get("rank"),
            world_size=data.get("worldSize"),
            rank_source=data.get("rankSource"),
            rank_provenance=data.get("rankProvenance"),
            backend=data.get("backend"),
            time_span=TimeSpan.from_json(span) if span else None,
            collectives=dict(data.get("collectives") or {}),
            collective_events=dict(data.get("collectiveEvents") or {}),
            collective_bytes=dict(data.get("collectiveBytes") or {}),
            node_counts=dict(data.get("nodeCounts") or {}),
            schema_version=data.get("schemaVersion"),
            pid=data.get("pid"),
            attributes=dict(data.get("attributes") or {}),
            process_groups=tuple(ProcessGroup.from_json(p) for p in data.get("processGroups", [])),
            members=tuple(cls.from_json(m) for m in data.get("members", [])),
            bytes_scanned=data.get("bytesScanned", 0),
            gpu_models=tuple(data.get("gpuModels") or ()),
            nccl_version=data.get("ncclVersion"),
            profiler_steps=data.get("profilerSteps"),
        )


@dataclass
class Draft:
    """The mutable state a scanner fills in; ``freeze`` turns it into a ``FileInspection``."""

    name: str
    nested: bool = False  # a member of an archive: a rank from its name is a member name's
    format: Format = "unknown"
    compression: Compression | None = None
    scan: Scan = "full"
    rank: int | None = None
    world_size: int | None = None
    rank_source: RankSource | None = None
    rank_provenance: str | None = None
    backend: str | None = None
    time_span: TimeSpan | None = None
    collectives: dict[str, int] = field(default_factory=dict)
    collective_events: dict[str, int] = field(default_factory=dict)
    collective_bytes: dict[str, int] = field(default_factory=dict)
    node_counts: dict[str, int] = field(default_factory=dict)
    schema_version: str | None = None
    pid: int | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    process_groups: list[ProcessGroup] = field(default_factory=list)
    members: list[FileInspection] = field(default_factory=list)
    bytes_scanned: int = 0
    gpu_models: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    profiler_steps: int | None = None

    def freeze(self, reason: str | None = None) -> FileInspection:
        """The finished inspection; a ``reason`` marks it ``failed``, as does a number out
        of range (left out, and named in the reason)."""
        problems = self._numbers_out_of_range()
        if problems:
            reason = "; ".join([*([reason] if reason else []), *problems])
        return FileInspection(
            name=self.name,
            format=self.format,
            status="failed" if reason else "complete",
            reason=reason,
            compression=self.compression,
            scan=self.scan,
            rank=self.rank,
            world_size=self.world_size,
            rank_source=self.rank_source,
            rank_provenance=self.rank_provenance,
            backend=self.backend,
            time_span=self.time_span,
            collectives=dict(sorted(self.collectives.items())),
            collective_events=dict(sorted(self.collective_events.items())),
            collective_bytes=dict(sorted(self.collective_bytes.items())),
            node_counts=dict(sorted(self.node_counts.items())),
            schema_version=self.schema_version,
            pid=self.pid,
            attributes=dict(self.attributes),
            process_groups=tuple(self.process_groups),
            members=tuple(self.members),
            bytes_scanned=self.bytes_scanned,
            gpu_models=tuple(self.gpu_models),
            nccl_version=self.nccl_version,
            profiler_steps=self.profiler_steps,
        )

    def _numbers_out_of_range(self) -> list[str]:
        """Leave out every number the service cannot store; what was left out, in words."""
        problems = []
        if self.rank is not None and not 0 <= self.rank < MAX_RANK_COUNT:
            source = f"{self.rank_source} " if self.rank_source else ""
            problems.append(
                f"{source}rank {_number_text(self.rank)} is out of range (0 to "
                f"{MAX_RANK_COUNT - 1:,}): left out"
            )
            self.rank, self.rank_source, self.rank_provenance = None, None, None
        if self.world_size is not None and not 1 <= self.world_size <= MAX_RANK_COUNT:
            problems.append(
                f"world_size {_number_text(self.world_size)} is out of range (1 to "
                f"{MAX_RANK_COUNT:,}): left out"
            )
            self.world_size = None
        if self.pid is not None and not 0 <= self.pid <= MAX_PID:
            problems.append(f"pid {_number_text(self.pid)} is out of range: left out")
            self.pid = None
        groups = [_group_in_range(group) for group in self.process_groups]
        if any(
            fixed is not group for fixed, group in zip(groups, self.process_groups, strict=True)
        ):
            problems.append(
                "process group sizes or member ranks out of range (0 to "
                f"{MAX_RANK_COUNT - 1:,}): left out"
            )
            self.process_groups = groups
        span = self.time_span
        if span is not None and not (_time_in_range(span.start_us) and _time_in_range(span.end_us)):
            problems.append(
                f"the time span ({_number_text(span.start_us)} to {_number_text(span.end_us)} "
                "us) is not finite within ±2^63 us (an event's ts or dur): left out"
            )
            self.time_span = None
        for key, value in self.attributes.items():
            if isinstance(value, float) and not math.isfinite(value):
                infinity = "Infinity" if value > 0 else "-Infinity"
                self.attributes[key] = "NaN" if math.isnan(value) else infinity
        return problems


def _number_text(value: Number) -> str:
    """A number for a message: whole when short, else its size (str() of a long int fails)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"of {value.bit_length()} bits"
    return f"{value}" if isinstance(value, int) else repr(value)


def _time_in_range(value: Number) -> bool:
    return (math.isfinite(value) if isinstance(value, float) else True) and abs(
        value
    ) <= MAX_TIME_US


def _group_in_range(group: ProcessGroup) -> ProcessGroup:
    """``group``, or a copy without the size or ranks out of range."""
    size_ok = group.size is None or 0 <= group.size <= MAX_RANK_COUNT
    ranks_ok = group.ranks is None or all(0 <= r < MAX_RANK_COUNT for r in group.ranks)
    if size_ok and ranks_ok:
        return group
    return replace(
        group,
        size=group.size if size_ok else None,
        ranks=group.ranks if ranks_ok else None,
    )


class InspectionError(Exception):
    """A file cannot be read to its end (truncated, malformed); the message is the reason."""
