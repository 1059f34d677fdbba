"""Is a traceset ready for the tools that consume traces? One check per tool.

- ``hta_ready``: Holistic Trace Analysis reads one Kineto trace per rank, keyed by rank;
  every Kineto trace must hold a rank of its own. Passes with the rank → file map HTA wants.
- ``chakra_ready``: Chakra's ``chakra_trace_link`` joins each rank's host execution trace
  with its device Kineto trace; every rank needs both.
- ``astra_ready``: ASTRA-sim reads Chakra traces named ``<prefix>.<rank>.et`` for ranks
  0..N-1: one prefix, one file per rank (a ranked file under another name is *nameable*).
- ``perfetto_ready``: a browser trace viewer (Perfetto UI, chrome://tracing) cannot open a
  JSON trace much past 1 GiB uncompressed; names the largest.

Every message names the files and ranks at fault, ranks as runs (``0..4, 6..7``): the work
and the text grow with the files, never with the expected rank count. These checks say what
a traceset can be used for; they do not make it invalid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tracestore.inspect.census import MAX_DUPLICATES_SHOWN, RankCensus
from tracestore.inspect.census_text import describe_files, describe_ranks, gaps, intervals
from tracestore.inspect.chakra import rank_from_name
from tracestore.inspect.model import CensusCheck, FileInspection
from tracestore.inspect.pairing import CHAKRA, EXECUTION_TRACE, KINDS, KINETO

# About the largest JSON a browser viewer opens (Perfetto UI's in-browser limit is ~1-2 GB).
PERFETTO_MAX_BYTES = 1024**3
JSON_TRACE_FORMATS = frozenset({"kineto_json", "pytorch_et_json", "chakra_json"})
# The checks by their key in ``inspection.readiness``, and their validate names.
READINESS_CHECK_NAMES = {
    "hta": "hta_ready",
    "chakra": "chakra_ready",
    "astra": "astra_ready",
    "perfetto": "perfetto_ready",
}
# The tool each check is about, as validate, ``show`` and the page name it.
READINESS_TOOLS = {"hta": "HTA", "chakra": "Chakra", "astra": "ASTRA-sim", "perfetto": "Perfetto"}
MAX_MAP_SHOWN = 8


def _gib(size: int) -> str:
    return f"{size / 1024**3:.2f} GiB" if size >= 1024**3 else f"{size / 1024**2:.1f} MiB"


def _ranks_text(ranks: Sequence[int]) -> str:
    return describe_ranks(intervals(sorted(ranks)))


class _Set:
    """The traces of a set by kind: per rank the files of each kind, and the unranked."""

    def __init__(self, files: Sequence[tuple[str, FileInspection]], census: RankCensus) -> None:
        self.leaves = [leaf for name, found in files for leaf in found.leaves(name)]
        self.by_rank: dict[int, dict[str, list[str]]] = {}
        for entry in census.ranks:
            for ranked in entry.files:
                self.by_rank.setdefault(entry.rank, {}).setdefault(ranked.kind, []).append(
                    ranked.file
                )
        kinds = {label: KINDS.get(leaf.format) for label, leaf in self.leaves}
        self.unranked = {
            kind: [label for label in census.unranked_files if kinds.get(label) == kind]
            for kind in (KINETO, EXECUTION_TRACE, CHAKRA)
        }
        self.expected = census.expected_rank_count

    def of_kind(self, kind: str) -> dict[int, list[str]]:
        return {rank: held[kind] for rank, held in sorted(self.by_rank.items()) if kind in held}

    def missing(self, ranks: Mapping[int, object]) -> list[tuple[int, int]]:
        """The runs of the expected ranks that ``ranks`` does not hold."""
        return gaps(sorted(ranks), self.expected or 0)


def _one_per_rank(by_rank: Mapping[int, list[str]], unranked: list[str], kind: str) -> list[str]:
    """Ranks held by several traces of a kind, and traces of it without a rank."""
    several = [(rank, names) for rank, names in by_rank.items() if len(names) > 1]
    problems = [
        f"rank {rank} is in {len(names)} {kind} traces: {describe_files(names)}"
        for rank, names in several[:MAX_DUPLICATES_SHOWN]
    ]
    if len(several) > MAX_DUPLICATES_SHOWN:
        more = len(several) - MAX_DUPLICATES_SHOWN
        problems.append(f"{more} more ranks are in several {kind} traces")
    if unranked:
        problems.append(f"{len(unranked)} {kind} traces record no rank: {describe_files(unranked)}")
    return problems


def hta_ready(traces: _Set) -> CensusCheck:
    kineto = traces.of_kind(KINETO)
    unranked = traces.unranked[KINETO]
    if not kineto and not unranked:
        return CensusCheck(False, "no Kineto traces: HTA reads the PyTorch profiler's JSON")
    problems = _one_per_rank(kineto, unranked, "Kineto")
    if missing := traces.missing(kineto):
        problems.append(f"no Kineto trace for ranks {describe_ranks(missing)}")
    if problems:
        return CensusCheck(False, "; ".join(problems))
    shown = [f"{rank}: {names[0]}" for rank, names in list(kineto.items())[:MAX_MAP_SHOWN]]
    more = f" and {len(kineto) - MAX_MAP_SHOWN} more" if len(kineto) > MAX_MAP_SHOWN else ""
    return CensusCheck(True, f"{len(kineto)} Kineto traces, one per rank: {', '.join(shown)}{more}")


def chakra_ready(traces: _Set) -> CensusCheck:
    kineto, host = traces.of_kind(KINETO), traces.of_kind(EXECUTION_TRACE)
    held = sorted(kineto.keys() | host.keys())
    neither = traces.missing(dict.fromkeys(held))
    if not held and not neither:
        return CensusCheck(
            False, "no ranked Kineto or execution traces: chakra_trace_link needs both per rank"
        )
    no_host = [r for r in held if r not in host]
    no_device = [r for r in held if r not in kineto]
    problems = []
    if no_host:
        problems.append(
            f"no host execution trace for ranks {_ranks_text(no_host)} (Kineto: "
            f"{describe_files([kineto[r][0] for r in no_host])})"
        )
    if no_device:
        problems.append(
            f"no device Kineto trace for ranks {_ranks_text(no_device)} (execution trace: "
            f"{describe_files([host[r][0] for r in no_device])})"
        )
    if neither:
        problems.append(f"neither trace for ranks {describe_ranks(neither)}")
    if problems:
        return CensusCheck(False, "; ".join(problems))
    return CensusCheck(
        True,
        f"each of ranks {_ranks_text(held)} has its host execution trace and its device "
        "Kineto trace",
    )


def astra_ready(traces: _Set) -> CensusCheck:
    chakra = traces.of_kind(CHAKRA)
    unranked = traces.unranked[CHAKRA]
    if not chakra and not unranked:
        return CensusCheck(
            False,
            "no Chakra execution traces: ASTRA-sim reads <prefix>.<rank>.et (convert the host "
            "and device traces with chakra_trace_link and chakra_converter)",
        )
    problems = _one_per_rank(chakra, unranked, "Chakra")
    expected = traces.expected or (max(chakra) + 1 if chakra else 0)
    if missing := gaps(chakra, expected):  # of_kind's ranks are sorted
        problems.append(f"no Chakra trace for ranks {describe_ranks(missing)}")
    formats = {leaf.format for _, leaf in traces.leaves if KINDS.get(leaf.format) == CHAKRA}
    if "chakra_json" in formats:
        problems.append("Chakra JSON is a dump for reading, not ASTRA-sim input (.et protobuf)")
    prefixes: dict[str, list[int]] = {}
    renamed: list[str] = []
    for rank, names in chakra.items():
        base = names[0].rsplit(":", 1)[-1].rsplit("/", 1)[-1]
        named = rank_from_name(base, "chakra_et")
        if named is not None and named[1] == rank and base.endswith(".et"):
            prefixes.setdefault(named[0], []).append(rank)
        else:
            renamed.append(f"{names[0]} → trace.{rank}.et")
    if len(prefixes) > 1:
        problems.append(
            f"{len(prefixes)} prefixes: "
            + "; ".join(f"{p} (ranks {_ranks_text(r)})" for p, r in sorted(prefixes.items()))
        )
    if problems:
        return CensusCheck(False, "; ".join(problems))
    prefix = next(iter(prefixes), "trace")
    if renamed:
        return CensusCheck(
            True,
            f"ranks 0..{expected - 1} each have one Chakra trace; nameable as "
            f"<prefix>.<rank>.et: {describe_files(renamed)}",
        )
    return CensusCheck(True, f"ranks 0..{expected - 1} as {prefix}.<rank>.et, one file each")


def perfetto_ready(traces: _Set) -> CensusCheck:
    sizes = sorted(
        (
            (leaf.bytes_scanned, label)
            for label, leaf in traces.leaves
            if leaf.format in JSON_TRACE_FORMATS and leaf.scan == "full"
        ),
        reverse=True,
    )
    if not sizes:
        return CensusCheck(True, "no JSON traces to open in a browser viewer")
    too_big = [(size, label) for size, label in sizes if size > PERFETTO_MAX_BYTES]
    if too_big:
        listed = ", ".join(f"{label} ({_gib(size)})" for size, label in too_big[:5])
        more = f" and {len(too_big) - 5} more" if len(too_big) > 5 else ""
        return CensusCheck(
            False,
            f"{len(too_big)} JSON traces past the {_gib(PERFETTO_MAX_BYTES)} a browser viewer "
            f"opens (uncompressed): {listed}{more}",
        )
    size, label = sizes[0]
    return CensusCheck(
        True,
        f"every JSON trace is under {_gib(PERFETTO_MAX_BYTES)} uncompressed; the largest is "
        f"{label} ({_gib(size)})",
    )


def readiness(files: Sequence[tuple[str, FileInspection]], census: RankCensus) -> dict[str, Any]:
    """``inspection.readiness``: ``{"hta": {passed, message, warning}, "chakra": ...}``."""
    traces = _Set(files, census)
    checks = {
        "hta": hta_ready(traces),
        "chakra": chakra_ready(traces),
        "astra": astra_ready(traces),
        "perfetto": perfetto_ready(traces),
    }
    return {key: check.to_json() for key, check in checks.items()}


def readiness_checks(recorded: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A recorded ``inspection.readiness`` as validate reports it, apart from the traceset's
    own checks: ``[{name, tool, ready, message}]`` (``ready`` null where not recorded)."""
    entries = []
    for key, name in READINESS_CHECK_NAMES.items():
        check = recorded.get(key)
        held = check if isinstance(check, Mapping) else {}
        entries.append(
            {
                "name": name,
                "tool": READINESS_TOOLS[key],
                "ready": held.get("passed"),
                "message": held.get("message"),
            }
        )
    return entries
