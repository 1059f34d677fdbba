"""The query of ``GET /api/v1/tracesets`` (docs/api.md), parsed and checked.

Every bad parameter is a ValidationError naming it; a parameter given twice is refused. A
parameter that is not one of the known ones and is a dotted snake_case path
(``workload_family``, ``shape.global_batch_size``) is a workload filter: JSON-typed equality
on that member of the stored workloadMetadata (nested objects, not keys holding dots). Its
value is read as JSON when it is a number, ``true``, ``false``, ``null`` or a quoted string,
and as a plain string otherwise: ``1024`` matches the number (and ``1024.0``), ``"1024"``
with the quotes matches the string, ``null`` matches an explicit null (not an absent member).
Any other spelling (``workloadFamily``, ``Status``, ``shape..x``) is refused as unknown.

``search`` is a case-insensitive substring of the name (Unicode case, ``%`` and ``_`` taken
literally). ``sort`` is a comma list of ``field:direction`` (direction defaults to ``asc``);
ties are broken by id, in the direction of the last field; tracesets without a rank count
come last under ``rankCount`` in both directions; ``name`` follows the database's collation
(code points on SQLite and on a PostgreSQL database created with the C or C.UTF-8 locale).
``step_time`` is the analysis summary's median step time: ties, and the tracesets without
one (which come last in both directions), in creation order (the sort's direction).
``minIdlePct``/``maxIdlePct`` bound the summary's median idle percentage, ``minOverlapPct``
its median communication overlap; a traceset without that number matches neither.
``uploadedBy`` is a user's id (``me``: the caller); ``tag`` an exact tag, and the only
parameter that may be repeated: a traceset must hold every tag given.
``census`` is the recorded census verdict (``pass``, ``fail``; ``unknown``: none recorded).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from tracestore.choices import CENSUS_VERDICTS, STATUSES
from tracestore.choices import SCOPES as SCOPES
from tracestore.errors import ValidationError
from tracestore.inspect.summary import SEARCH_FACTS, WORLD_SIZE_FACT, fact_value
from tracestore.schemas import lone_surrogate

# A cursor's form (``listing.encode_cursor``): its payload and signature, each base64url. The
# OpenAPI description gives it; a cursor of this form that the service did not sign is
# refused with listing.BAD_CURSOR.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"
CURSOR_FORM = re.compile(CURSOR_PATTERN)

SORT_FIELDS = ("created", "name", "status", "size", "rankCount", "step_time")
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_WORKLOAD_FILTERS = 16
MAX_PATH_DEPTH = 8
MAX_SEGMENT = 64
MAX_TAG_FILTERS = 8
ME = "me"
KNOWN_PARAMETERS = (
    "workspaceId",
    "status",
    "scope",
    "search",
    "sort",
    "limit",
    "next",
    "createdAfter",
    "createdBefore",
    "minRankCount",
    "maxRankCount",
    "minWorldSize",
    "maxWorldSize",
    "minIdlePct",
    "maxIdlePct",
    "minOverlapPct",
    "uploadedBy",
    "tag",
    "census",
)
# The analysis filters: a percentage each (ListQuery's field for each parameter).
PERCENT_PARAMETERS = {
    "minIdlePct": "min_idle_pct",
    "maxIdlePct": "max_idle_pct",
    "minOverlapPct": "min_overlap_pct",
}
INSPECTED_PREFIX = "inspected."
_PATH = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")


@dataclass(frozen=True)
class SortKey:
    field: str
    descending: bool

    def text(self) -> str:
        return f"{self.field}:{'desc' if self.descending else 'asc'}"


@dataclass(frozen=True)
class WorkloadFilter:
    """Equality of the member at ``path`` of the stored workloadMetadata with ``value``."""

    path: tuple[str, ...]
    value: Any


@dataclass(frozen=True)
class InspectedFilter:
    """A fact inspection derived (``gpu_model``, ``backend`` ...) equal to ``value`` (its
    stored, lower-cased form)."""

    fact: str
    value: str


@dataclass(frozen=True)
class ListQuery:
    workspace_id: str | None = None
    status: str | None = None
    scope: str | None = None
    search: str | None = None
    sort: tuple[SortKey, ...] = (SortKey("created", True),)
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    min_rank_count: int | None = None
    max_rank_count: int | None = None
    workload: tuple[WorkloadFilter, ...] = field(default_factory=tuple)
    inspected: tuple[InspectedFilter, ...] = field(default_factory=tuple)
    min_world_size: int | None = None
    max_world_size: int | None = None
    min_idle_pct: float | None = None
    max_idle_pct: float | None = None
    min_overlap_pct: float | None = None
    uploaded_by: str | None = None  # a user's id, or ME
    tags: tuple[str, ...] = ()
    census: str | None = None

    def binding(self) -> dict[str, Any]:
        """What a cursor is bound to: the sort and every filter (not the limit)."""
        return {
            "workspaceId": self.workspace_id,
            "status": self.status,
            "scope": self.scope,
            "search": self.search,
            "sort": [key.text() for key in self.sort],
            "createdAfter": None if self.created_after is None else self.created_after.isoformat(),
            "createdBefore": (
                None if self.created_before is None else self.created_before.isoformat()
            ),
            "minRankCount": self.min_rank_count,
            "maxRankCount": self.max_rank_count,
            "workload": sorted(
                [".".join(f.path), json.dumps(f.value, sort_keys=True)] for f in self.workload
            ),
            "inspected": sorted([f.fact, f.value] for f in self.inspected),
            "minWorldSize": self.min_world_size,
            "maxWorldSize": self.max_world_size,
            "minIdlePct": self.min_idle_pct,
            "maxIdlePct": self.max_idle_pct,
            "minOverlapPct": self.min_overlap_pct,
            "uploadedBy": self.uploaded_by,
            "tag": sorted(self.tags),
            "census": self.census,
        }


def sort_pattern(fields: tuple[str, ...] = SORT_FIELDS) -> str:
    """What ``parse_sort`` reads, as the OpenAPI description's pattern: a comma list of
    fields, each with an optional ``:asc`` or ``:desc`` (any case)."""
    part = rf"\s*(?:{'|'.join(fields)})(?:\s*|:\s*(?:[aA][sS][cC]|[dD][eE][sS][cC])?\s*)"
    return rf"^{part}(?:,{part})*$"


def parse_sort(text: str, fields: tuple[str, ...] = SORT_FIELDS) -> tuple[SortKey, ...]:
    """``created:desc,name:asc`` → sort keys of ``fields``; the direction defaults to ``asc``."""
    keys: list[SortKey] = []
    for part in text.split(","):
        name, _, direction = part.strip().partition(":")
        if name not in fields:
            raise ValidationError(
                f"Invalid sort field: {name!r}. Valid fields: {', '.join(fields)}"
            )
        direction = direction.strip().lower() or "asc"
        if direction not in ("asc", "desc"):
            raise ValidationError(
                f"Invalid sort direction {direction!r} for {name!r} in sort: use asc or desc"
            )
        if any(key.field == name for key in keys):
            raise ValidationError(f"Sort field {name!r} is given more than once in sort")
        keys.append(SortKey(name, direction == "desc"))
    return tuple(keys)


def parse_timestamp(name: str, text: str) -> datetime:
    """An RFC 3339 timestamp with a zone (``2026-11-30T09:00:00Z``) or a date (midnight UTC)."""
    problem = (
        f"{name} must be an RFC 3339 timestamp with a time zone such as "
        f"2026-11-30T09:00:00Z, or a date such as 2026-11-30; got {text!r}"
    )
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise ValidationError(problem) from None
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    if not re.fullmatch(
        r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text
    ):
        raise ValidationError(problem)
    try:
        return datetime.fromisoformat(text.upper().replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: UTC falls outside years 1-9999
        raise ValidationError(problem) from None


def parse_integer(name: str, text: str, low: int, high: int) -> int:
    if not re.fullmatch(r"[+-]?\d{1,19}", text.strip()) or not low <= int(text) <= high:
        raise ValidationError(f"{name} must be an integer from {low} to {high}; got {text!r}")
    return int(text)


# A percentage as the analysis filters take it, 0 to 100 with at most 6 decimals (spaces
# around allowed); the OpenAPI description gives the same pattern.
PERCENT_PATTERN = r"^\s*(?:100(?:\.0{1,6})?|[0-9]{1,2}(?:\.[0-9]{1,6})?)\s*$"
_PERCENT = re.compile(PERCENT_PATTERN)


def parse_percent(name: str, text: str) -> float:
    """A percentage from 0 to 100 (``12.5``); ValidationError naming ``name`` otherwise."""
    if not _PERCENT.match(text):
        raise ValidationError(f"{name} must be a percentage from 0 to 100; got {text!r}")
    return float(text)


def filter_value(text: str) -> Any:
    """The JSON-typed value of a workload filter, as the queryable copy of the metadata holds
    it (``jsontext.plain``: a U+0000 there is U+FFFD, so ``a%00b`` finds ``"a\\u0000b"``)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, float) and not math.isfinite(value):
        value = text
    if isinstance(value, dict | list):
        value = text
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def _workload_filter(name: str, text: str) -> WorkloadFilter:
    if not _PATH.fullmatch(name):
        raise ValidationError(
            f"Unknown query parameter {name!r}. Known parameters: {', '.join(KNOWN_PARAMETERS)}; "
            "workload filters name a member of workloadMetadata as a dotted snake_case path "
            "such as workload_family or shape.global_batch_size"
        )
    path = tuple(name.split("."))
    if len(path) > MAX_PATH_DEPTH or any(len(seg) > MAX_SEGMENT for seg in path):
        raise ValidationError(
            f"Workload filter {name!r} is too long: at most {MAX_PATH_DEPTH} segments of "
            f"at most {MAX_SEGMENT} characters"
        )
    value = filter_value(text)
    surrogate = lone_surrogate(value) if isinstance(value, str) else None
    if surrogate is not None:  # a JSON "\ud800": no stored metadata can hold it
        raise ValidationError(
            f"Workload filter {name!r} holds a lone surrogate ({surrogate}), "
            "which is not Unicode text"
        )
    return WorkloadFilter(path, value)


_INSPECTED_FACTS = (*SEARCH_FACTS, WORLD_SIZE_FACT)


def _inspected_filter(name: str, text: str) -> tuple[str, Any]:
    """``inspected.<fact>=value``: ``(fact, value)``, the world size as an integer."""
    fact = name.removeprefix(INSPECTED_PREFIX)
    if fact not in _INSPECTED_FACTS:
        raise ValidationError(
            f"Unknown inspected fact {fact!r} in {name!r}. Inspected facts: "
            + ", ".join(f"{INSPECTED_PREFIX}{f}" for f in _INSPECTED_FACTS)
        )
    if fact == WORLD_SIZE_FACT:
        return fact, parse_integer(name, text, 1, 2**63 - 1)
    if not text.strip():
        raise ValidationError(f"{name} must not be empty")
    return fact, fact_value(text)


def parse_list_query(params: Iterable[tuple[str, str]]) -> ListQuery:
    """The query of ``GET /api/v1/tracesets``; ValidationError names any bad parameter."""
    seen: dict[str, str] = {}
    tags: list[str] = []
    for name, value in params:
        if name == "tag":
            tags.append(_tag_filter(value))
            continue
        if name in seen:
            raise ValidationError(f"Query parameter {name!r} is given more than once")
        seen[name] = value
    if len(tags) > MAX_TAG_FILTERS:
        raise ValidationError(f"At most {MAX_TAG_FILTERS} tag filters may be given")
    values: dict[str, Any] = {}
    workload: list[WorkloadFilter] = []
    inspected: list[InspectedFilter] = []
    for name, text in seen.items():
        if name.startswith(INSPECTED_PREFIX):
            fact, value = _inspected_filter(name, text)
            if fact == WORLD_SIZE_FACT:
                values["world_size"] = value
            else:
                inspected.append(InspectedFilter(fact, value))
        elif name not in KNOWN_PARAMETERS:
            workload.append(_workload_filter(name, text))
        elif name == "status":
            if text not in STATUSES:
                raise ValidationError(
                    f"Invalid status: {text!r}. Valid statuses: {', '.join(STATUSES)}"
                )
            values["status"] = text
        elif name == "census":
            if text not in CENSUS_VERDICTS:
                raise ValidationError(
                    f"Invalid census: {text!r}. Valid verdicts: {', '.join(CENSUS_VERDICTS)}"
                )
            values["census"] = text
        elif name == "scope":
            if text not in SCOPES:
                raise ValidationError(f"Invalid scope: {text!r}. Valid scopes: {', '.join(SCOPES)}")
            values["scope"] = text
        elif name == "sort":
            values["sort"] = parse_sort(text)
        elif name == "limit":
            values["limit"] = parse_integer("limit", text, 1, MAX_LIMIT)
        elif name in ("createdAfter", "createdBefore"):
            key = "created_after" if name == "createdAfter" else "created_before"
            values[key] = parse_timestamp(name, text)
        elif name in ("minRankCount", "maxRankCount"):
            key = "min_rank_count" if name == "minRankCount" else "max_rank_count"
            values[key] = parse_integer(name, text, 0, 2**63 - 1)
        elif name in ("minWorldSize", "maxWorldSize"):
            key = "min_world_size" if name == "minWorldSize" else "max_world_size"
            values[key] = parse_integer(name, text, 0, 2**63 - 1)
        elif name in PERCENT_PARAMETERS:
            values[PERCENT_PARAMETERS[name]] = parse_percent(name, text)
        elif name == "workspaceId":
            if not text:
                raise ValidationError("workspaceId must not be empty")
            values["workspace_id"] = text
        elif name == "uploadedBy":
            if not text.strip() or len(text) > 64:
                raise ValidationError(
                    f"uploadedBy must be a user's id (createdBy.id of a traceset) or {ME}; "
                    f"got {text!r}"
                )
            values["uploaded_by"] = text.strip()
        elif name == "next":
            if not CURSOR_FORM.fullmatch(text):
                raise ValidationError("next must be a cursor from pagination.nextCursor")
            values["cursor"] = text
        else:  # search; an empty one matches every name
            if "\x00" in text:
                raise ValidationError(
                    "search contains a NUL character (U+0000), which no name can hold"
                )
            values["search"] = text or None
    if len(workload) > MAX_WORKLOAD_FILTERS:
        raise ValidationError(f"At most {MAX_WORKLOAD_FILTERS} workload filters may be given")
    # inspected.world_size=N is the range N..N (one indexed column, not a fact row).
    if "world_size" in values:
        size = values.pop("world_size")
        values["min_world_size"] = max(values.get("min_world_size", size), size)
        values["max_world_size"] = min(values.get("max_world_size", size), size)
    return ListQuery(
        **values,
        workload=tuple(workload),
        inspected=tuple(inspected),
        tags=tuple(dict.fromkeys(tags)),
    )


def _tag_filter(text: str) -> str:
    """A ``tag`` filter: an exact tag, as upload takes them (1 to 64 characters)."""
    if not 1 <= len(text) <= 64 or "\x00" in text or lone_surrogate(text) is not None:
        raise ValidationError(
            f"tag must be a tag as upload takes them (1 to 64 characters, no U+0000); "
            f"got {text[:80]!r}"
        )
    return text
