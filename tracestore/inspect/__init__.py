"""Trace inspection: each file's format, rank and contents, and a traceset's rank census.

Every reader streams with bounded memory and never raises on bad input: an unrecognised
file is ``unknown``, a truncated or malformed one ``failed`` with a reason. Typical use::

    found = [(p.name, inspect_path(p, p.name)) for p in paths]
    census = rank_census(found, declared_rank_count=8, workload_metadata=metadata)
    census.rank_count_matches.passed, census.rank_count_matches.message
"""

from __future__ import annotations

from tracestore.inspect.census import RankCensus, rank_census, validation_checks
from tracestore.inspect.census_files import RankRange
from tracestore.inspect.files import Opener, inspect_file, inspect_path, sniff_format
from tracestore.inspect.groups import FoundGroup
from tracestore.inspect.model import CensusCheck, FileInspection, ProcessGroup, TimeSpan
from tracestore.inspect.parallelism import parallelism_degrees
from tracestore.inspect.streams import BinaryReader

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
