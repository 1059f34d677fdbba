"""Trace inspection: each file's format, rank and contents, and a traceset's rank census.

Every reader streams with bounded memory and never raises on bad input: an unrecognised
file is ``unknown``, a truncated or malformed one ``failed`` with a reason. Typical use::

    found = [(p.name, inspect_path(p, p.name)) for p in paths]
    census = rank_census(found, declared_rank_count=8, workload_metadata=metadata)
    census.rank_count_matches.passed, census.rank_count_matches.message
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracestore.inspect.census import RankCensus, rank_census, validation_checks
    from tracestore.inspect.census_files import RankRange
    from tracestore.inspect.files import Opener, inspect_file, inspect_path, sniff_format
    from tracestore.inspect.groups import FoundGroup
    from tracestore.inspect.model import CensusCheck, FileInspection, ProcessGroup, TimeSpan
    from tracestore.inspect.parallelism import parallelism_degrees
    from tracestore.inspect.streams import BinaryReader

# The exports load on first use (PEP 562): a reader of one format (the analysis, a fresh
# `tracestore analyze`) then does not import the census and its dependencies (pydantic,
# through metadata), ~10 MiB and a tenth of a second.
_HOMES = {
    "BinaryReader": "streams",
    "CensusCheck": "model",
    "FileInspection": "model",
    "FoundGroup": "groups",
    "Opener": "files",
    "ProcessGroup": "model",
    "RankCensus": "census",
    "RankRange": "census_files",
    "TimeSpan": "model",
    "inspect_file": "files",
    "inspect_path": "files",
    "parallelism_degrees": "parallelism",
    "rank_census": "census",
    "sniff_format": "files",
    "validation_checks": "census",
}

__all__ = [
    "BinaryReader",
    "CensusCheck",
    "FileInspection",
    "FoundGroup",
    "Opener",
    "ProcessGroup",
    "RankCensus",
    "RankRange",
    "TimeSpan",
    "inspect_file",
    "inspect_path",
    "parallelism_degrees",
    "rank_census",
    "sniff_format",
    "validation_checks",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
