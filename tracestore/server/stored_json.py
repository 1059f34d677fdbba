"""JSON the service stores, bounded: a document over its limit is shortened until it fits.

``bounded`` shortens a stored inspection (``TRACESTORE_MAX_INSPECTION_SIZE``) and each rank's
stored analysis (its share of ``TRACESTORE_MAX_ANALYSIS_SIZE``) alike: the top two levels
keep their members, lists and texts below are cut, and a ``truncated`` member says so.
"""

from __future__ import annotations

import json
from typing import Any

# How a stored inspection over its limit is shortened, step by step until it fits: every
# list and object below the top two levels to its first N members, every text to its first
# M characters (the checks' messages to at least 1024).
SHRINK_STEPS = ((1000, 4096), (100, 1024), (10, 256), (0, 256))
_WHOLE = ("checks", "readiness")  # objects whose members are kept: validate reports them


def bounded(
    value: dict[str, Any], limit: int, setting: str = "TRACESTORE_MAX_INSPECTION_SIZE"
) -> dict[str, Any]:
    """``value`` (an inspection's JSON, a rank's analysis) if its text is at most ``limit``
    bytes, else shortened by ``SHRINK_STEPS`` until it is, with a ``truncated`` member saying
    so (and naming the ``setting`` the limit comes from). The top two levels keep their
    members, so every reader finds the members it looks for."""
    size = json_size(value)
    if size <= limit:
        return value
    what = "inspection" if setting == "TRACESTORE_MAX_INSPECTION_SIZE" else "analysis"
    shrunk = value
    for items, chars in SHRINK_STEPS:
        shrunk = _shrunk(value, items, chars, 0)
        shrunk["truncated"] = {
            "size": size,
            "limit": limit,
            "message": f"this {what}'s {size:,} bytes of JSON were shortened to fit "
            f"{limit:,} ({setting}): lists and objects keep their first "
            f"{items}, texts their first {chars} characters",
        }
        if json_size(shrunk) <= limit:
            break
    return shrunk


_DECODER = json.JSONDecoder()


def members(text: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The top-level ``names`` of a stored JSON object (ours: compact, every member's key
    once), each decoded alone: the rest of the text (a rank's kernel rows, its collectives)
    is never parsed. A ``"key":`` with its quotes bare cannot lie inside a JSON string, whose
    quotes are escaped; a reader names only members that no deeper object of the text has."""
    found: dict[str, Any] = {}
    for name in names:
        at = text.find(f'"{name}":')
        if at >= 0:
            found[name] = _DECODER.raw_decode(text, at + len(name) + 3)[0]
    return found


def json_size(value: Any) -> int:
    """The bytes of ``value``'s compact JSON text (UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _shrunk(value: Any, items: int, chars: int, depth: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + "…"
    if isinstance(value, dict):
        whole = depth < 2 or items < 0
        kept = list(value.items()) if whole else list(value.items())[:items]
        return {
            key: _shrunk(item, -1, max(chars, 1024), depth + 1)
            if key in _WHOLE
            else _shrunk(item, items, chars, depth + 1)
            for key, item in kept
        }
    if isinstance(value, list):
        kept_items = value if items < 0 else value[:items]
        return [_shrunk(item, items, chars, depth + 1) for item in kept_items]
    return value
