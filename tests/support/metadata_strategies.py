"""Hypothesis strategies of workloadMetadata for the property tests: arbitrary JSON (nested
nulls, floats, huge integers and integers about the 2,147,483,647 limit, booleans, unicode
strings), nesting about the 64-level body limit and sizes about the 65,536-byte limit; one
for upload-url's rules (``metadata_values``) and one for promotion's (``promotion_metadata``)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.metadata_model import DEGREES, LIMIT, PROMOTION_DEGREES, SHAPE_NUMBERS, TEXTS


def nested(levels: int) -> Any:
    """``levels`` of arrays and objects, alternating, around a null."""
    value: Any = None
    for level in range(levels):
        value = [value] if level % 2 else {"n": value}
    return value


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.integers(LIMIT - 3, LIMIT + 3),
    st.integers(-(10**40), 10**40),
    # Huge: hundreds of digits, so that messages must cut them and products grow past 1,000.
    st.integers(10**200, 10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 2.0, 8.0, 1e3, -0.0, 1e-7, 1.5e300]),
    st.text(max_size=8),
    st.sampled_from(["4", "8", "ünï", "1e3", '"\\', "漢字🚀", "é" * 50]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
rank_values = st.one_of(st.integers(1, 64), st.integers(1, 64), scalars, json_values)
members = st.one_of(
    st.none(),
    json_values,
    st.dictionaries(
        st.sampled_from(["rankCount", "rank_count", *DEGREES, "cp", "fsdp", "other"]),
        rank_values,
        max_size=6,
    ),
)
# Unicode, and lengths about the 65,536-byte limit (é is 2 bytes).
padding = st.one_of(*[st.text(max_size=50)] * 3, st.integers(32_700, 32_780).map("é".__mul__))
# About the 64 levels a request body may nest (workloadMetadata.deep sits at depth 3).
deep = st.integers(0, 8).map(nested) | st.integers(58, 66).map(nested)
# Mostly whole numbers, some past the limit, some not numbers: the rank-count rules' turn.
counts = st.one_of(
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(LIMIT - 3, LIMIT + 3),
    st.integers(10**200, 10**400),
    rank_values,
)
metadata_values = st.one_of(
    st.none(),
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "shape": st.dictionaries(
                st.sampled_from(["rankCount", "rank_count", "other"]), counts, max_size=2
            ),
            "parallelism": st.dictionaries(
                st.sampled_from([*DEGREES, "cp", "fsdp"]), counts, max_size=4
            ),
            "deep": deep,
        },
    ),
    # Both forms, well formed: equal or differing.
    st.fixed_dictionaries(
        {
            "shape": st.fixed_dictionaries({"rankCount": st.sampled_from([1, 2, 4, 8, 16])}),
            "parallelism": st.dictionaries(st.sampled_from(DEGREES), st.integers(1, 4)),
        }
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "shape": members,
            "parallelism": members,
            "workload_family": json_values,
            "nulls": st.recursive(
                st.none(), lambda inner: st.lists(inner, max_size=1), max_leaves=30
            ),
            "deep": deep,
            "padding": padding,
        },
    ),
)


promotion_metadata = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            **{name: st.one_of(st.text(max_size=8), scalars) for name in TEXTS},
            "shape": st.one_of(
                members,
                st.dictionaries(
                    st.sampled_from([*SHAPE_NUMBERS, "rankCount", "other"]), counts, max_size=4
                ),
            ),
            "parallelism": st.one_of(
                members,
                st.dictionaries(st.sampled_from([*PROMOTION_DEGREES, "x"]), counts, max_size=4),
            ),
            "workloadFamily": json_values,
            "deep": deep,
            "padding": padding,
        },
    ),
    # Mostly well-formed: the degree, divisibility and product rules get their turn.
    st.fixed_dictionaries(
        {
            "parallelism": st.dictionaries(
                st.sampled_from(PROMOTION_DEGREES), st.integers(1, 8), min_size=1, max_size=4
            )
        },
        optional={
            "shape": st.dictionaries(
                st.sampled_from(["rank_count", "rankCount", "seq_len"]),
                st.sampled_from([1, 2, 4, 8, 16, 64]),
                max_size=2,
            ),
            "workload_family": st.text(max_size=8),
        },
    ),
)
