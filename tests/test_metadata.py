"""The workloadMetadata rules, over dict literals taken from the reference's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracestore import jsontext
from tracestore.errors import UnprocessableEntity, ValidationError
from tracestore.metadata import (
    DEGREES,
    MAX_METADATA_BYTES,
    MAX_RANK_COUNT,
    MISSING_RANK_COUNT_MESSAGE,
    PromotionMetadata,
    check_promotion_metadata,
    check_upload_metadata,
    declared_rank_count,
    metadata_size,
    near_misses,
)

MEMBERS = ["shape.rankCount", *(f"parallelism.{degree}" for degree in DEGREES)]
PRODUCT = "(dp × tp × sp × ep × pp)"


def with_member(member: str, value: Any) -> dict[str, Any]:
    """``{"shape": {"rankCount": value}}`` for ``"shape.rankCount"``, and so on."""
    outer, inner = member.split(".")
    return {outer: {inner: value}}


def upload_error(metadata: object, *, has_primary_files: bool = True) -> str:
    with pytest.raises(ValidationError) as caught:
        check_upload_metadata(metadata, has_primary_files=has_primary_files)
    assert caught.value.status == 400
    return caught.value.message


def promotion_error(metadata: object, *, held: int | None = None) -> str:
    with pytest.raises(UnprocessableEntity) as caught:
        check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=held)
    assert caught.value.status == 422
    return caught.value.message


def padded(template: dict[str, Any], size: int, filler: str = "a") -> dict[str, Any]:
    """``template`` plus a ``note`` member of ``filler`` that makes it exactly ``size`` bytes."""
    base = metadata_size({**template, "note": ""})
    width = len(filler.encode())
    count, rest = divmod(size - base, width)
    metadata = {**template, "note": filler * count + "a" * rest}
    assert metadata_size(metadata) == size
    return metadata


# --- declaring the rank count ------------------------------------------------------------

THE_256_RANK_EXAMPLE = {"parallelism": {"dp": 32, "tp": 8, "pp": 1}, "shape": {"rankCount": 256}}


@pytest.mark.parametrize(
    ("metadata", "rank_count"),
    [
        (THE_256_RANK_EXAMPLE, 256),
        ({"parallelism": {"dp": 32, "tp": 8, "pp": 1}}, 256),
        ({"shape": {"rankCount": 256}}, 256),
        ({"shape": {"rankCount": 1}}, 1),
        ({"parallelism": {"dp": 2, "tp": 2, "sp": 2, "ep": 2, "pp": 2}}, 32),
        ({"parallelism": {"dp": None, "tp": 8}}, 8),
        ({"parallelism": {"tp": 8, "cp": 2.5, "fsdp": "x"}}, 8),
        ({"parallelism": {"tp": 8, "DP": 4}}, 8),
        ({"shape": {"rankCount": 8, "rank_count": 4}}, 8),
        ({"shape": {"rankCount": MAX_RANK_COUNT}}, MAX_RANK_COUNT),
        ({"parallelism": {"dp": 65536, "tp": 32767}, "shape": None}, 65536 * 32767),
        ({"workload_family": [1, 2], "workloadFamily": {"x": 1}, "shape": {"rankCount": 4}}, 4),
    ],
)
def test_declared_rank_count(metadata: dict[str, Any], rank_count: int) -> None:
    assert declared_rank_count(metadata) == rank_count
    assert check_upload_metadata(metadata, has_primary_files=True) == rank_count
    assert check_upload_metadata(metadata, has_primary_files=False) == rank_count


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        {},
        {"shape": None},
        {"parallelism": None},
        {"shape": {}},
        {"shape": {"rankCount": None}},
        {"shape": {"rank_count": 8}},
        {"parallelism": {}},
        {"parallelism": {"cp": 2, "fsdp": 2}},
        {"parallelism": {"DP": 8, "Tp": 2}},
        {"parallelism": {"dp": None, "tp": None, "sp": None, "ep": None, "pp": None}},
        {"workload_family": "gpt", "shape": {"global_batch_size": 1024}},
    ],
)
def test_missing_declaration(metadata: object) -> None:
    assert declared_rank_count(metadata) is None
    assert upload_error(metadata, has_primary_files=True) == MISSING_RANK_COUNT_MESSAGE
    assert check_upload_metadata(metadata, has_primary_files=False) is None


def test_missing_declaration_message_is_the_seeds() -> None:
    assert MISSING_RANK_COUNT_MESSAGE == (
        "Uploads with primary trace files must declare a rank count: set "
        "workloadMetadata.shape.rankCount, or workloadMetadata.parallelism degrees "
        "(dp, tp, sp, ep, pp)"
    )


BAD_VALUES = [
    (0, "0"),
    (-1, "-1"),
    (2.0, "2.0"),
    ("4", '"4"'),
    (True, "true"),
    (False, "false"),
    ([], "[]"),
    ({}, "{}"),
    (1e3, "1000.0"),
]


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize(("value", "text"), BAD_VALUES)
def test_bad_value_is_refused_naming_member_and_value(member: str, value: Any, text: str) -> None:
    metadata = with_member(member, value)
    expected = f"workloadMetadata.{member} must be a whole number of at least 1, got {text}"
    assert upload_error(metadata) == expected
    assert upload_error(metadata, has_primary_files=False) == expected
    with pytest.raises(ValidationError, match="whole number"):
        declared_rank_count(metadata)


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize("text", ["2.0", "1e3", "4.5", "-0.0"])
def test_bad_value_keeps_its_json_text(member: str, text: str) -> None:
    outer, inner = member.split(".")
    metadata = jsontext.loads(f'{{"{outer}": {{"{inner}": {text}}}}}')
    assert upload_error(metadata).endswith(
        f"workloadMetadata.{member} must be a whole number of at least 1, got {text}"
    )


def test_mismatch_names_both_numbers() -> None:
    metadata = {"parallelism": {"dp": 32, "tp": 8}, "shape": {"rankCount": 255}}
    message = upload_error(metadata)
    assert f"shape.rankCount 255 differs from the parallelism product 256 {PRODUCT}" in message
    assert message.startswith("workloadMetadata.shape.rankCount 255")


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ({"shape": {"rankCount": MAX_RANK_COUNT + 1}}, "workloadMetadata.shape.rankCount"),
        ({"parallelism": {"dp": 65536, "tp": 32768}}, f"the parallelism product {PRODUCT}"),
        ({"parallelism": {"dp": MAX_RANK_COUNT + 1}}, f"the parallelism product {PRODUCT}"),
        (
            {"parallelism": {"dp": 65536, "tp": 32768}, "shape": {"rankCount": 2**31}},
            "workloadMetadata.shape.rankCount",
        ),
    ],
)
def test_rank_count_bound(metadata: dict[str, Any], named: str) -> None:
    message = upload_error(metadata, has_primary_files=False)
    assert named in message
    assert "2147483648" in message
    assert "2,147,483,647" in message


def test_huge_product_is_refused_without_rendering_every_digit() -> None:
    metadata = {"parallelism": {"dp": 10**4000, "tp": 10**4000}}
    message = upload_error(metadata)
    assert "about 8001 digits" in message


@pytest.mark.parametrize(
    ("value", "text"),
    [([1, 2], "[1,2]"), ("x", '"x"'), (3, "3"), (2.5, "2.5"), (True, "true"), (False, "false")],
)
def test_non_object_is_refused(value: Any, text: str) -> None:
    assert upload_error(value) == f"workloadMetadata must be an object or null, got {text}"
    for member in ("shape", "parallelism"):
        expected = f"workloadMetadata.{member} must be an object or null, got {text}"
        assert upload_error({member: value}, has_primary_files=False) == expected
        with pytest.raises(ValidationError, match="object or null"):
            declared_rank_count({member: value})


def test_long_value_is_cut_in_messages() -> None:
    message = upload_error(list(range(1000)))
    assert message.endswith("…")
    assert len(message) < 150


# --- size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("filler", ["a", "é", "漢", "🚀"])
def test_size_limit_is_inclusive(filler: str) -> None:
    template = {"shape": {"rankCount": 8}}
    at_limit = padded(template, MAX_METADATA_BYTES, filler)
    assert check_upload_metadata(at_limit, has_primary_files=True) == 8
    over = padded(template, MAX_METADATA_BYTES + 1, filler)
    assert upload_error(over) == (
        "workloadMetadata is larger than 65,536 bytes when serialized: 65,537 bytes"
    )


def test_size_is_compact_utf8() -> None:
    metadata = {"a": [1, 2], "b": "é"}
    assert metadata_size(metadata) == len('{"a":[1,2],"b":"é"}'.encode())
    assert metadata_size(None) == 4


def test_size_is_the_same_for_both_parsers() -> None:
    text = '{"x": 1e3, "y": 2.0}'
    assert metadata_size(jsontext.loads(text)) == metadata_size(json.loads(text))


# --- order of the rules -------------------------------------------------------------------


def test_type_error_comes_before_size() -> None:
    metadata = padded({"shape": [1]}, MAX_METADATA_BYTES + 1)
    assert upload_error(metadata).startswith("workloadMetadata.shape must be an object")


def test_size_comes_before_member_values() -> None:
    metadata = padded({"shape": {"rankCount": "4"}}, MAX_METADATA_BYTES + 1)
    assert upload_error(metadata).startswith("workloadMetadata is larger than 65,536 bytes")


def test_declared_rank_count_ignores_size() -> None:
    assert declared_rank_count(padded({"shape": {"rankCount": 4}}, 70_000)) == 4


def test_member_values_come_before_bound() -> None:
    metadata = {"shape": {"rankCount": 2**31}, "parallelism": {"tp": "4"}}
    assert upload_error(metadata).startswith("workloadMetadata.parallelism.tp")


def test_bound_comes_before_mismatch() -> None:
    metadata = {"shape": {"rankCount": 2**31}, "parallelism": {"tp": 4}}
    assert "2,147,483,647" in upload_error(metadata)


def test_shape_is_checked_before_parallelism() -> None:
    metadata = {"parallelism": {"dp": 0}, "shape": {"rankCount": 0}}
    assert upload_error(metadata).startswith("workloadMetadata.shape.rankCount")


# --- promotion ----------------------------------------------------------------------------


def test_promotion_reads_snake_case_descriptive_members() -> None:
    metadata = {
        "workload_family": "gpt",
        "workloadFamily": "llama",
        "model_name": "gpt-3",
        "shape": {"rankCount": 256, "global_batch_size": 1024, "seq_len": 2048},
        "parallelism": {"dp": 32, "tp": 8, "pp": 1, "cp": 2, "fsdp": 4},
    }
    model = check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=256)
    assert isinstance(model, PromotionMetadata)
    assert model.workload_family == "gpt"
    assert model.model_name == "gpt-3"
    assert model.model_extra == {"workloadFamily": "llama"}
    assert model.shape is not None and model.shape.global_batch_size == 1024
    assert model.parallelism is not None and model.parallelism.product == 256


def test_promotion_ignores_camel_case_descriptive_members() -> None:
    model = check_promotion_metadata(
        {"workloadFamily": 3, "shape": {"globalBatchSize": "x", "rankCount": 8}},
        traceset_id="ts_x",
        held_rank_count=8,
    )
    assert model.workload_family is None


def test_promotion_treats_null_as_absent() -> None:
    metadata = {"workload_family": None, "shape": None, "parallelism": None}
    assert check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=None)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            jsontext.loads('{"parallelism": {"dp": 4, "cp": 2.5}}'),
            "workloadMetadata.parallelism.cp must be a whole number of at least 1, got 2.5",
        ),
        (
            {"parallelism": {"cp": 2}},
            "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp,"
            ' got {"cp":2}',
        ),
        (
            {"parallelism": {}},
            "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp, got {}",
        ),
        (
            # The object as given: its nulls and unknown members too.
            {"parallelism": {"dp": None, "x": "y", "cp": 2}},
            "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp,"
            ' got {"dp":null,"x":"y","cp":2}',
        ),
        (
            {"parallelism": {"cp": 1, "fsdp": 2}},
            "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp,"
            ' got {"cp":1,"fsdp":2}',
        ),
        (
            {"parallelism": {"dp": 8, "fsdp": 3}},
            "workloadMetadata.parallelism.fsdp 3 must divide dp 8",
        ),
        (
            {"parallelism": {"tp": 4, "fsdp": 2}},
            "workloadMetadata.parallelism.fsdp 2 must divide dp, which is 1 when absent",
        ),
        (
            {"parallelism": {"dp": 4, "fsdp": 0}},
            "workloadMetadata.parallelism.fsdp must be a whole number of at least 1, got 0",
        ),
        (
            {"parallelism": {"dp": 32, "tp": 8}, "shape": {"rank_count": 255}},
            "workloadMetadata.shape.rank_count 255 differs from the parallelism product 256"
            f" {PRODUCT}",
        ),
        (
            {"shape": {"rankCount": 256, "rank_count": 255}},
            "workloadMetadata.shape.rank_count 255 differs from"
            " workloadMetadata.shape.rankCount 256",
        ),
        (
            {"shape": {"rank_count": 0}},
            "workloadMetadata.shape.rank_count must be a whole number of at least 1, got 0",
        ),
        (
            {"shape": {"global_batch_size": "1024"}},
            "workloadMetadata.shape.global_batch_size must be a whole number of at least 1,"
            ' got "1024"',
        ),
        (
            {"shape": {"seq_len": 2.0}},
            "workloadMetadata.shape.seq_len must be a whole number of at least 1, got 2.0",
        ),
        (
            {"shape": {"training_steps": True}},
            "workloadMetadata.shape.training_steps must be a whole number of at least 1, got true",
        ),
        ({"precision": 16}, "workloadMetadata.precision must be a string, got 16"),
        ({"shape": [256]}, "workloadMetadata.shape must be an object or null, got [256]"),
        ("x", 'workloadMetadata must be an object, got "x"'),
        (None, "workloadMetadata must be an object, got null"),
    ],
)
def test_promotion_member_checks(metadata: object, message: str) -> None:
    assert promotion_error(metadata, held=256) == message


def test_promotion_checks_members_before_the_guard() -> None:
    metadata = {"shape": {"rankCount": 128}, "parallelism": {"cp": 2}}
    assert promotion_error(metadata, held=256).startswith("workloadMetadata.parallelism must")


def test_promotion_guard_reports_upload_rule_errors_as_422() -> None:
    message = promotion_error({"shape": {"rankCount": "256"}}, held=256)
    assert (
        message
        == 'workloadMetadata.shape.rankCount must be a whole number of at least 1, got "256"'
    )


@pytest.mark.parametrize(
    ("metadata", "held", "message"),
    [
        (
            {"shape": {"rankCount": 128}},
            256,
            "workloadMetadata declares rank count 128, but traceset ts_x holds 256;"
            " a rank count cannot be changed after upload",
        ),
        (
            {"workload_family": "gpt"},
            256,
            "workloadMetadata declares no rank count, but traceset ts_x holds 256;"
            " a rank count cannot be changed after upload",
        ),
        (
            {"shape": {"rank_count": 256}},
            256,
            "workloadMetadata declares no rank count, but traceset ts_x holds 256;"
            " a rank count cannot be changed after upload (workloadMetadata.shape.rank_count is"
            " not read as a declaration of the rank count: did you mean `rankCount`?)",
        ),
        (
            {"parallelism": {"dp": 8, "tp": 8}},
            None,
            "workloadMetadata declares rank count 64, but traceset ts_x holds no rank count;"
            " a rank count cannot be changed after upload",
        ),
    ],
)
def test_promotion_rank_count_guard(
    metadata: dict[str, Any], held: int | None, message: str
) -> None:
    assert promotion_error(metadata, held=held) == message


@pytest.mark.parametrize(
    ("metadata", "held"),
    [
        (THE_256_RANK_EXAMPLE, 256),
        ({"shape": {"rankCount": 256, "rank_count": 256}}, 256),
        ({"parallelism": {"dp": 32, "tp": 8, "fsdp": 8}, "shape": {"rank_count": 256}}, 256),
        ({"workload_family": "gpt"}, None),
        ({}, None),
    ],
)
def test_promotion_accepts(metadata: dict[str, Any], held: int | None) -> None:
    check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=held)


# --- near misses (issue 43, item 9) ----------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "hints"),
    [
        (
            {"shape": {"rank_count": 256}},
            [
                "workloadMetadata.shape.rank_count is not read as a declaration of the rank "
                "count: did you mean `rankCount`?"
            ],
        ),
        (
            {"parallelism": {"DP": 32, "tp": 8}},
            [
                "workloadMetadata.parallelism.DP is not read as a declaration of the rank "
                "count: did you mean `dp`?"
            ],
        ),
        (
            {"workloadFamily": "llm", "shape": {"global_batch_sise": 8}},
            [
                "workloadMetadata.workloadFamily is not a member the rules read: did you mean "
                "`workload_family`?",
                "workloadMetadata.shape.global_batch_sise is not a member the rules read: did "
                "you mean `global_batch_size`?",
            ],
        ),
        # Spelled as the rules read them, or both spellings given: nothing to say.
        ({"shape": {"rankCount": 8, "rank_count": 8}, "parallelism": {"dp": 8}}, []),
        ({"shape": {"rankCount": 8}, "workload_family": "llm", "lr": 0.1}, []),
        ({"parallelism": {"cp": 2, "fsdp": 2}}, []),
        (None, []),
        ([1], []),
        ({"shape": "wide"}, []),
    ],
)
def test_near_misses_name_the_member_the_rules_read(metadata: Any, hints: list[str]) -> None:
    assert near_misses(metadata) == hints


def test_the_seeds_message_stays_the_seeds_with_a_near_miss() -> None:
    with pytest.raises(ValidationError) as refused:
        check_upload_metadata({"shape": {"rank_count": 256}}, has_primary_files=True)
    assert refused.value.message == MISSING_RANK_COUNT_MESSAGE


def test_promotions_guard_says_did_you_mean() -> None:
    with pytest.raises(UnprocessableEntity) as refused:
        check_promotion_metadata(
            {"shape": {"rank_count": 256}}, traceset_id="ts_x", held_rank_count=256
        )
    assert refused.value.message == (
        "workloadMetadata declares no rank count, but traceset ts_x holds 256; a rank count "
        "cannot be changed after upload (workloadMetadata.shape.rank_count is not read as a "
        "declaration of the rank count: did you mean `rankCount`?)"
    )
