"""The searchable facts of a traceset: what its files say, in one small summary.

``traceset_summary`` condenses the inspections of a traceset's primary files and its census
into ``inspection.summary`` (formats, ranks captured against the world size, GPU models,
backends, NCCL versions, profiler steps per rank, time span, collective counts).
``search_facts`` turns a summary into the ``(fact, value)`` pairs the list route filters on
with ``inspected.<fact>=value``: lower-cased, and a GPU model also by each word of its name,
so ``gpu_model=H100`` finds ``NVIDIA H100 80GB HBM3``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tracestore.inspect.census import RankCensus
from tracestore.inspect.model import FileInspection

# The facts ``inspected.<fact>`` may name, and the summary member each is read from.
SEARCH_FACTS: Mapping[str, str] = {
    "gpu_model": "gpuModels",
    "backend": "backends",
    "format": "formats",
    "nccl_version": "ncclVersions",
}
# ``inspected.world_size`` is an integer, stored in a column of its own.
WORLD_SIZE_FACT = "world_size"
MAX_FACT_VALUE = 255
_WORD = re.compile(r"[^\s,;()/]+")


def _distinct(values: Iterator[str | None]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return seen


def traceset_summary(
    files: Sequence[tuple[str, FileInspection]], census: RankCensus
) -> dict[str, Any]:
    """``inspection.summary``: the facts of the primary files ``[(name, inspection)]``."""
    leaves = [leaf for name, found in files for _, leaf in found.leaves(name)]
    steps = [leaf.profiler_steps for leaf in leaves if leaf.profiler_steps is not None]
    spans = [leaf.time_span for leaf in leaves if leaf.time_span is not None]
    collectives: dict[str, int] = {}
    for leaf in leaves:
        for name, count in leaf.collectives.items():
            collectives[name] = collectives.get(name, 0) + count
    recorded = list(census.world_sizes)
    world = recorded[0] if len(recorded) == 1 else census.expected_rank_count
    start = min((s.start_us for s in spans), default=None)
    end = max((s.end_us for s in spans), default=None)
    return {
        "formats": sorted(_distinct(leaf.format for leaf in leaves if leaf.format != "unknown")),
        "ranksCaptured": len(census.ranks_found),
        "worldSize": world,
        "gpuModels": _distinct(m for leaf in leaves for m in leaf.gpu_models),
        "backends": _distinct(leaf.backend for leaf in leaves),
        "ncclVersions": _distinct(leaf.nccl_version for leaf in leaves),
        "profilerSteps": {"min": min(steps), "max": max(steps)} if steps else None,
        "timeSpan": (
            None
            if start is None or end is None
            else {"startUs": start, "endUs": end, "durationUs": end - start}
        ),
        "collectives": dict(sorted(collectives.items())),
    }


def fact_value(text: str) -> str:
    """A fact's value as stored and as a filter is compared with it."""
    return text.strip().lower()[:MAX_FACT_VALUE]


def search_facts(summary: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The ``(fact, value)`` pairs of a summary the list route can filter on."""
    facts: set[tuple[str, str]] = set()
    for fact, member in SEARCH_FACTS.items():
        for value in summary.get(member) or ():
            if not isinstance(value, str) or not value.strip():
                continue
            facts.add((fact, fact_value(value)))
            if fact == "gpu_model":
                facts.update((fact, fact_value(word)) for word in _WORD.findall(value))
    return facts


def summary_world_size(summary: Mapping[str, Any]) -> int | None:
    """The world size a summary records, for ``minWorldSize``/``maxWorldSize``."""
    world = summary.get("worldSize")
    return world if isinstance(world, int) and not isinstance(world, bool) else None
