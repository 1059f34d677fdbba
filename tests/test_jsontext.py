"""``jsontext.compact``: pydantic-core's serializer writing what ``json.dumps`` writes (compact
separators, non-ASCII kept) for every value the request path hands it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tracestore import jsontext


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Strings of any code point a Python str can hold, lone surrogates included.
_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None))
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_compact_writes_what_json_dumps_writes(value: Any) -> None:
    assert jsontext.compact(value) == _dumps(value)


def test_every_code_point_and_the_edges_are_written_alike() -> None:
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    edges: list[Any] = [
        every,
        "\ud800 lone surrogate",
        {"\udfff": ["\x00", "\x1f", "\x7f", "\u2028", '"', "\\", "/"]},
        [2**64, -(2**63) - 1, 10**40, 0, True, False, None],
        {"items": [], "pagination": {"count": 0, "hasMore": False, "nextCursor": None}},
    ]
    for value in edges:
        assert jsontext.compact(value) == _dumps(value)
