"""The searchable facts of a traceset: what its files say, in one small summary.

``traceset_summary`` condenses the inspections of a traceset's primary files and its census
into ``inspection.summary`` (formats, ranks captured against the world size, GPU models,
backends, NCCL versions, profiler steps per rank, time span, collective counts).
``search_facts`` turns a summary into the ``(fact, value)`` pairs the list route filters on
with ``inspected.<fact>=value``: lower-cased, and a GPU model also by each word of its name,
so ``gpu_model=H100`` finds ``NVIDIA H100 80GB HBM3``.

Distinct values are kept in sets (one look-up each), and at most ``max_values`` of them per
member (``TRACESTORE_INSPECTION_DISTINCT_VALUES`` on the server): a file naming 100,000 GPU
models gives 32 and ``valuesCut: {"gpuModels": 99968}``, and a traceset at most
``max_values`` values per fact plus as many GPU-model words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
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
# Distinct values a summary member keeps, and values a traceset is searchable by per fact.
MAX_DISTINCT_VALUES = 32
_WORD = re.compile(r"[^\s,;()/]+")


def _distinct(values: Iterable[str | None], limit: int) -> tuple[list[str], int]:
    """The first ``limit`` distinct values in order, and how many more distinct ones there are."""
    seen = dict.fromkeys(value for value in values if value)
    kept = list(islice(seen, limit))
    return kept, len(seen) - len(kept)


def traceset_summary(
    files: Sequence[tuple[str, FileInspection]],
    census: RankCensus,
    *,
    max_values: int = MAX_DISTINCT_VALUES,
) -> dict[str, Any]:
    """``inspection.summary``: the facts of the primary files ``[(name, inspection)]``, each
    member of distinct values cut at ``max_values`` (``valuesCut``: how many were left out)."""
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
    distinct = {
        "formats": (leaf.format for leaf in leaves if leaf.format != "unknown"),
        "gpuModels": (m for leaf in leaves for m in leaf.gpu_models),
        "backends": (leaf.backend for leaf in leaves),
        "ncclVersions": (leaf.nccl_version for leaf in leaves),
    }
    kept: dict[str, list[str]] = {}
    cut: dict[str, int] = {}
    for member, values in distinct.items():
        kept[member], left_out = _distinct(values, max_values)
        if left_out:
            cut[member] = left_out
    return {
        "formats": sorted(kept["formats"]),
        "ranksCaptured": len(census.ranks_found),
        "worldSize": world,
        "gpuModels": kept["gpuModels"],
        "backends": kept["backends"],
        "ncclVersions": kept["ncclVersions"],
        "profilerSteps": {"min": min(steps), "max": max(steps)} if steps else None,
        "timeSpan": (
            None
            if start is None or end is None
            else {"startUs": start, "endUs": end, "durationUs": end - start}
        ),
        "collectives": dict(sorted(collectives.items())),
        "valuesCut": cut,
    }


def fact_value(text: str) -> str:
    """A fact's value as stored and as a filter is compared with it."""
    return text.strip().lower()[:MAX_FACT_VALUE]


def search_facts(
    summary: Mapping[str, Any], *, max_values: int = MAX_DISTINCT_VALUES
) -> set[tuple[str, str]]:
    """The ``(fact, value)`` pairs of a summary the list route can filter on: per fact the
    first ``max_values`` values, and for GPU models as many of their words."""
    facts: set[tuple[str, str]] = set()
    for fact, member in SEARCH_FACTS.items():
        values = summary.get(member)
        texts = [v for v in values if isinstance(v, str) and v.strip()] if values else []
        whole = list(islice(dict.fromkeys(fact_value(v) for v in texts), max_values))
        facts.update((fact, value) for value in whole)
        if fact == "gpu_model":
            words = dict.fromkeys(word for value in whole for word in _WORD.findall(value))
            facts.update((fact, word) for word in islice(words, max_values))
    return facts


def summary_world_size(summary: Mapping[str, Any]) -> int | None:
    """The world size a summary records, for ``minWorldSize``/``maxWorldSize``."""
    world = summary.get("worldSize")
    return world if isinstance(world, int) and not isinstance(world, bool) else None
