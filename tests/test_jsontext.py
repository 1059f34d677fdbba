"""``jsontext.compact``: pydantic-core's serializer writing what ``json.dumps`` writes (compact
separators, non-ASCII kept) for every value the request path hands it; and ``jsontext.dumps``,
which hands it the values it can write, writing what its own writer writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
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


@pytest.mark.slow
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


# What dumps must write itself: numbers as written, embedded JSON, subclasses, other keys.
_KEPT = st.sampled_from(
    [
        jsontext.RawNumber("2.0"),
        jsontext.RawNumber("1e400"),
        jsontext.RawJSON('{"a": 1}'),
        1.5,
        {1: "x"},
        {True: "x"},
        (1, "t"),
    ]
)
_MIXED = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT | _KEPT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


def _written(value: Any) -> str:
    parts: list[str] = []
    jsontext._write(value, parts)
    return "".join(parts)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_MIXED)
def test_dumps_writes_what_its_own_writer_writes(value: Any) -> None:
    assert jsontext.dumps(value) == _written(value)


def test_dumps_keeps_what_only_its_own_writer_keeps() -> None:
    assert (
        jsontext.dumps({"lr": jsontext.RawNumber("1e-7"), "n": 2**70})
        == '{"lr":1e-7,"n":1180591620717411303424}'
    )
    assert jsontext.dumps({"x": jsontext.RawJSON('{"a": 1}')}) == '{"x":{"a": 1}}'
    assert jsontext.dumps({1: [True, None]}) == '{"1":[true,null]}'
    assert jsontext.dumps({True: 1}) == '{"True":1}'  # str(key), as written before
    assert jsontext.dumps([1.0, 1e-07]) == "[1.0,1e-07]"
    with pytest.raises(ValueError):  # more digits than int writes
        jsontext.dumps({"dp": 10**5000})
    with pytest.raises(TypeError):
        jsontext.dumps({"a": object()})
    with pytest.raises(ValueError):
        jsontext.dumps([float("nan")])
