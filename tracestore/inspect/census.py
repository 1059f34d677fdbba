"""The rank census of a traceset: do its files hold the ranks its metadata declares?

Ranks come only from what inspection established (Kineto ``distributedInfo``, execution-trace
``record_param_comms`` rows, Chakra file names, a Kineto/ET partner's pid; see ``pairing``); a
file without one is *unranked*, never rank 0. Archive members count as files of their own,
named ``archive:member``; members that are not traces (README, configs) are left out. Three
checks come out, each with a message naming files and ranks: ``rank_count_matches`` (the
validate check ``rank_census``), ``parallelism_consistent`` (``parallelism_consistency``,
made by ``parallelism``) and ``process_groups_match`` (made by ``groups``).
docs/inspection.md lists every message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tracestore.choices import CensusVerdict
from tracestore.inspect.census_files import (
    RankRange,
    rank_provenance,
    rank_ranges,
    single_file_holds_all,
)
from tracestore.inspect.census_text import describe_files, describe_ranks, gaps, intervals
from tracestore.inspect.chakra import rank_from_name
from tracestore.inspect.groups import FoundGroup, process_group_check, process_groups
from tracestore.inspect.model import ARCHIVE_FORMATS, TRACE_FORMATS, CensusCheck, FileInspection
from tracestore.inspect.pairing import Pairing, RankedFile, RankEntry, pair, ranked_file
from tracestore.inspect.parallelism import (
    parallelism_check,
    parallelism_degrees,
    parallelism_product,
)

MAX_DUPLICATES_SHOWN = 5
MAX_MEMBERS_LISTED = 16
ExpectedFrom = Literal["declared", "worldSize", "ranks"]


@dataclass(frozen=True)
class RankCensus:
    """Ranks found, missing and duplicated across a traceset's primary files."""

    declared_rank_count: int | None
    parallelism_product: int | None
    expected_rank_count: int | None
    expected_from: ExpectedFrom | None
    ranks_found: tuple[int, ...]
    ranks_missing: tuple[RankRange, ...]
    ranks_unexpected: tuple[int, ...]
    duplicated: Mapping[int, tuple[str, ...]]
    unranked_files: tuple[str, ...]
    failed_files: Mapping[str, str]
    world_sizes: Mapping[int, tuple[str, ...]]
    chakra_prefixes: Mapping[str, tuple[int, ...]]
    rank_ranges: Mapping[str, RankRange | None]
    rank_count_matches: CensusCheck
    parallelism_consistent: CensusCheck
    ranks: tuple[RankEntry, ...] = ()
    rank_provenance: Mapping[str, str | None] = field(default_factory=dict)
    process_groups: tuple[FoundGroup, ...] = ()
    process_groups_match: CensusCheck = field(
        default_factory=lambda: CensusCheck(True, "no process groups recorded")
    )

    @property
    def missing_count(self) -> int:
        """How many ranks are missing."""
        return sum(r.end - r.start + 1 for r in self.ranks_missing)

    def to_json(self) -> dict[str, Any]:
        """The camelCase, JSON-safe form (the ``inspection`` member of a traceset)."""
        return {
            "declaredRankCount": self.declared_rank_count,
            "parallelismProduct": self.parallelism_product,
            "expectedRankCount": self.expected_rank_count,
            "expectedFrom": self.expected_from,
            "ranksFound": list(self.ranks_found),
            "ranksMissing": [r.to_json() for r in self.ranks_missing],
            "missingCount": self.missing_count,
            "ranksUnexpected": list(self.ranks_unexpected),
            "duplicatedRanks": [
                {"rank": rank, "files": list(files)} for rank, files in self.duplicated.items()
            ],
            "unrankedFiles": list(self.unranked_files),
            "failedFiles": [{"file": f, "reason": r} for f, r in self.failed_files.items()],
            "worldSizes": [
                {"worldSize": size, "files": list(files)}
                for size, files in self.world_sizes.items()
            ],
            "chakraPrefixes": [
                {"prefix": prefix, "ranks": list(ranks)}
                for prefix, ranks in self.chakra_prefixes.items()
            ],
            "rankRanges": {
                name: r.to_json() if r else None for name, r in self.rank_ranges.items()
            },
            "rankProvenance": dict(self.rank_provenance),
            "ranks": [entry.to_json() for entry in self.ranks],
            "processGroups": [group.to_json() for group in self.process_groups],
            "checks": {
                "rankCountMatches": self.rank_count_matches.to_json(),
                "parallelismConsistent": self.parallelism_consistent.to_json(),
                "processGroupsMatch": self.process_groups_match.to_json(),
            },
        }


# The validate check each census check is reported as, by its key in ``to_json()["checks"]``.
VALIDATION_CHECK_NAMES = {
    "rankCountMatches": "rank_census",
    "parallelismConsistent": "parallelism_consistency",
    "processGroupsMatch": "process_groups",
}


def validation_checks(census: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checks of a census in its JSON form (``RankCensus.to_json()``, what a
    traceset's ``inspection`` stores) as ``validate`` reports them:
    ``[{name, passed, message}]`` (and ``warning`` where a check has one). A census recorded
    before a check existed leaves that check out."""
    checks = census["checks"]
    return [
        {"name": name, **checks[key]}
        for key, name in VALIDATION_CHECK_NAMES.items()
        if key in checks
    ]


def upload_problems(census: RankCensus) -> list[str]:
    """What an upload is warned of before it is sent (``tracestore upload``, the web page's
    upload): the messages of the rank-count and parallelism checks that fail. Process groups
    are left to the service's full inspection: a quick one does not read them all."""
    checks = (census.rank_count_matches, census.parallelism_consistent)
    return [check.message for check in checks if not check.passed]


# The searchable facts (``traceset_facts``) a recorded census leaves: its verdict, which the
# list's ``census`` filter looks up, and how many ranks it misses, which list items show.
CENSUS_FACT = "census"
MISSING_RANKS_FACT = "census_missing"


def census_verdict(census: Mapping[str, Any]) -> tuple[CensusVerdict, int]:
    """A census in its JSON form (``RankCensus.to_json()``) judged whole: ``fail`` when any
    of its checks failed (as promotion judges it), else ``pass``; and its missing ranks."""
    checks = census.get("checks")
    failed = isinstance(checks, Mapping) and any(
        isinstance(check, Mapping) and check.get("passed") is False for check in checks.values()
    )
    missing = census.get("missingCount")
    count = missing if isinstance(missing, int) and not isinstance(missing, bool) else 0
    return ("fail" if failed else "pass"), count


def census_facts(census: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The ``(fact, value)`` pairs a recorded census is listed and filtered by."""
    verdict, missing = census_verdict(census)
    return {(CENSUS_FACT, verdict), (MISSING_RANKS_FACT, str(missing))}


@dataclass
class _Found:
    """What the files say, keyed for the checks; file labels name archive members too."""

    traces: list[RankedFile] = field(default_factory=list)
    world_sizes: dict[int, list[str]] = field(default_factory=dict)
    prefixes: dict[str, set[int]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    order: list[tuple[str, str]] = field(default_factory=list)  # ("file" | "archive", label)
    top: dict[str, str] = field(default_factory=dict)  # label -> its primary file's label
    groups: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # comm groups
    group_uses: list[tuple[str, int, list[str]]] = field(default_factory=list)

    def add(self, label: str, inspection: FileInspection, primary: str | None = None) -> None:
        """Count one file; archives count through their members (``archive:member``)."""
        nested = primary is not None
        if inspection.format in ARCHIVE_FORMATS:
            if inspection.status == "failed":
                self.failed[label] = inspection.reason or "failed"
            for member in inspection.members:
                self.add(f"{label}:{member.name}", member, primary or label)
            if not nested:
                self.order.append(("archive", label))
            return
        if inspection.format == "comm_groups":
            self._add_groups(label, inspection)
            return
        # Members that are not traces (README, configs) are not expected to hold a rank.
        if nested and inspection.format not in TRACE_FORMATS and inspection.status != "failed":
            return
        if inspection.status == "failed":
            self.failed[label] = inspection.reason or "failed"
        self.traces.append(ranked_file(label, inspection))
        self.order.append(("file", label))
        self.top[label] = primary or label
        if inspection.world_size is not None:
            self.world_sizes.setdefault(inspection.world_size, []).append(label)
        named = rank_from_name(inspection.name, inspection.format)
        if named is not None:
            self.prefixes.setdefault(named[0], set()).add(named[1])
        used = [g.name for g in inspection.process_groups if g.collectives and g.name]
        if used and inspection.rank is not None:
            self.group_uses.append((label, inspection.rank, used))

    def _add_groups(self, label: str, inspection: FileInspection) -> None:
        """A comm-group file: its groups, and the world its members make up."""
        members: set[int] = set()
        for group in inspection.process_groups:
            if group.name is not None and group.ranks is not None:
                self.groups.setdefault(group.name, (label, group.ranks))
                members.update(group.ranks)
        if members:
            self.world_sizes.setdefault(max(members) + 1, []).append(label)

    def group_problems(self) -> list[str]:
        """Chakra traces whose collectives run on groups the comm-group file leaves out, or
        that do not hold their rank (the first few named, the rest counted)."""
        if not self.groups:
            return []
        members = {name: frozenset(ranks) for name, (_, ranks) in self.groups.items()}
        listing = describe_files(sorted({f for f, _ in self.groups.values()}))
        problems: list[str] = []
        count = 0
        for label, rank, used in self.group_uses:
            for name in used:
                if name in members and rank in members[name]:
                    continue
                count += 1
                if count > MAX_DUPLICATES_SHOWN:
                    continue
                if name not in members:
                    problems.append(
                        f'{label} runs collectives on process group "{name}", which {listing} '
                        "does not list"
                    )
                else:
                    where, ranks = self.groups[name]
                    problems.append(
                        f'{label} (rank {rank}) runs collectives on process group "{name}", '
                        f"which {where} gives as {_members_text(ranks)}, without rank {rank}"
                    )
        if count > MAX_DUPLICATES_SHOWN:
            problems.append(f"{count - MAX_DUPLICATES_SHOWN} more process-group problems")
        return problems

    def unranked(self, pairing: Pairing) -> list[str]:
        """Unranked files, and primary archives holding no ranked trace, in file order."""
        unranked = {f.file for f in pairing.unranked}
        holding = {self.top[f.file] for files in pairing.by_rank.values() for f in files}
        return [
            label
            for kind, label in self.order
            if (label in unranked if kind == "file" else label not in holding)
        ]


def rank_census(
    files: Sequence[tuple[str, FileInspection]],
    *,
    declared_rank_count: int | None,
    workload_metadata: object,
) -> RankCensus:
    """The census of the primary files ``[(name in the traceset, inspection), ...]``.

    ``declared_rank_count`` is the traceset's ``rankCountDerived``; ``workload_metadata`` its
    stored ``workloadMetadata`` (any JSON value; only ``parallelism`` degrees are read).
    """
    seen = _Found()
    for name, inspection in files:
        seen.add(name, inspection)
    pairing = pair(seen.traces)
    by_rank = {rank: [f.file for f in held] for rank, held in pairing.by_rank.items()}
    unranked = seen.unranked(pairing)
    found = sorted(by_rank)
    declared = declared_rank_count
    degrees = parallelism_degrees(workload_metadata)
    product = parallelism_product(degrees.values()) if degrees else None
    expected, expected_from = _expected(declared, seen.world_sizes, found)
    missing = gaps(found, expected or 0)
    unexpected = [r for r in found if expected is not None and r >= expected]
    duplicated = pairing.duplicated()
    single_opaque, not_opaque = single_file_holds_all(files, declared, found)
    where = _source_text(expected_from, declared)
    groups = process_groups(files)

    problems: list[str] = [not_opaque] if not_opaque else []
    for rank, dupes in list(duplicated.items())[:MAX_DUPLICATES_SHOWN]:
        problems.append(f"rank {rank} is recorded by {len(dupes)} files: {describe_files(dupes)}")
    if len(duplicated) > MAX_DUPLICATES_SHOWN:
        problems.append(f"{len(duplicated) - MAX_DUPLICATES_SHOWN} more ranks are duplicated")
    problems += pairing.problems + seen.group_problems()
    if missing and expected and not single_opaque:  # the opaque file holds them all
        problems.append(
            f"{sum(b - a + 1 for a, b in missing)} of {expected} ranks missing: "
            f"{describe_ranks(missing)} (expected 0..{expected - 1}, {where})"
        )
    if unexpected:
        outside = f"outside 0..{(expected or 0) - 1} for {where}"
        holders = [name for rank in unexpected for name in by_rank[rank]]
        if len(unexpected) == 1:
            problems.append(f"rank {unexpected[0]} ({describe_files(holders)}) is {outside}")
        else:
            problems.append(
                f"ranks {describe_ranks(intervals(unexpected))} are {outside}, "
                f"in {describe_files(holders)}"
            )
    for size, names in sorted(seen.world_sizes.items()):
        if expected is not None and size != expected:
            problems.append(
                f"world_size {size} recorded by {describe_files(names)} differs from {where}"
            )
    if expected is None and len(seen.world_sizes) > 1:
        problems.append(
            "the files disagree on world_size: "
            + "; ".join(
                f"{size} in {describe_files(names)}"
                for size, names in sorted(seen.world_sizes.items())
            )
        )
    if len(seen.prefixes) > 1:
        problems.append(
            f"{len(seen.prefixes)} unrelated Chakra prefixes: "
            + "; ".join(
                f"{p} (ranks {describe_ranks(intervals(sorted(r)))})"
                for p, r in sorted(seen.prefixes.items())
            )
        )
    notes: list[str] = []
    if unranked:
        notes.append(f"{len(unranked)} without a rank: {describe_files(unranked)}")
    if seen.failed:
        notes.append(f"{len(seen.failed)} not fully readable: {describe_files(list(seen.failed))}")

    return RankCensus(
        declared_rank_count=declared,
        parallelism_product=product,
        expected_rank_count=expected,
        expected_from=expected_from,
        ranks_found=tuple(found),
        ranks_missing=tuple(RankRange(a, b) for a, b in missing),
        ranks_unexpected=tuple(unexpected),
        duplicated=duplicated,
        unranked_files=tuple(unranked),
        failed_files=seen.failed,
        world_sizes={size: tuple(names) for size, names in sorted(seen.world_sizes.items())},
        chakra_prefixes={p: tuple(sorted(r)) for p, r in sorted(seen.prefixes.items())},
        rank_ranges=rank_ranges(files, declared, pairing),
        rank_count_matches=_rank_check(
            problems, notes, found, expected, expected_from, files, declared
        ),
        parallelism_consistent=parallelism_check(
            degrees, product, declared, seen.world_sizes, found, by_rank
        ),
        ranks=pairing.entries(),
        rank_provenance=rank_provenance(files, pairing, declared),
        process_groups=groups,
        process_groups_match=process_group_check(
            groups,
            workload_metadata,
            world_size=expected,
            ranks_found=len([r for r in found if expected is None or r < expected]),
        ),
    )


def _expected(
    declared: int | None, world_sizes: Mapping[int, list[str]], found: list[int]
) -> tuple[int | None, ExpectedFrom | None]:
    if declared is not None:
        return declared, "declared"
    if len(world_sizes) == 1:
        return next(iter(world_sizes)), "worldSize"
    if found and not world_sizes:
        return found[-1] + 1, "ranks"
    return None, None


def _members_text(ranks: Sequence[int]) -> str:
    """A group's members as the comm-group file lists them, or as runs when they are many."""
    if len(ranks) <= MAX_MEMBERS_LISTED:
        return str(list(ranks))
    return f"{len(ranks)} ranks {describe_ranks(intervals(sorted(ranks)))}"


def _source_text(expected_from: ExpectedFrom | None, declared: int | None) -> str:
    if expected_from == "declared":
        return f"the declared rank count {declared}"
    if expected_from == "worldSize":
        return "the world_size the files record"
    return "the highest rank found"


def _rank_check(
    problems: list[str],
    notes: list[str],
    found: list[int],
    expected: int | None,
    expected_from: ExpectedFrom | None,
    files: Sequence[tuple[str, FileInspection]],
    declared: int | None,
) -> CensusCheck:
    tail = f"; {'; '.join(notes)}" if notes else ""
    if problems:
        return CensusCheck(False, "; ".join(problems) + tail)
    if not files:
        return CensusCheck(True, "no primary trace files")
    if not found and declared is not None and len(files) == 1:  # the only, opaque file
        return CensusCheck(
            True,
            f"{files[0][0]} is the only primary file and records no rank; it is taken to hold "
            f"all {declared} declared ranks (0..{declared - 1}){tail}",
        )
    if expected is None:
        return CensusCheck(True, f"no rank count declared and no rank recorded{tail}")
    declared_text = (
        f"declared rank count {declared}"
        if expected_from == "declared"
        else f"{expected} ranks ({_source_text(expected_from, declared)}; none declared)"
    )
    return CensusCheck(
        True,
        f"ranks 0..{expected - 1} each recorded by one file, matching the {declared_text}{tail}",
    )
