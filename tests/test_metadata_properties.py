"""Property tests (hypothesis) of the upload and promotion metadata rules against a model of
them written here from the seed page (/work/shared/seed/workload-metadata.txt) and SPEC 4
and 6, deliberately simple and sharing no code with ``tracestore.metadata``.

For arbitrary JSON (nested nulls, floats, huge integers, booleans, unicode strings, deep
nesting) the service's verdict, error code and whole message equal the model's, and an
accepted upload's rank count and stored metadata are the model's too: in the pure rules and
through the upload-url and promote routes. Fixed seed: the same cases every run."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from tests.uploading import upload
from tracestore.errors import UnprocessableEntity, ValidationError
from tracestore.metadata import check_promotion_metadata, check_upload_metadata

LIMIT = 2_147_483_647
DEGREES = ["dp", "tp", "sp", "ep", "pp"]
PRODUCT = "the parallelism product (dp × tp × sp × ep × pp)"
MISSING = (
    "Uploads with primary trace files must declare a rank count: "
    "set workloadMetadata.shape.rankCount, "
    "or workloadMetadata.parallelism degrees (dp, tp, sp, ep, pp)"
)
TOO_DEEP = "Request body nests arrays and objects more than 64 levels deep"

# A verdict: None when accepted, else (HTTP status, error code, message).
Refusal = tuple[int, str, str] | None


def refused(message: str) -> Refusal:
    return 400, "VALIDATION_ERROR", message


def unprocessable(message: str) -> Refusal:
    return 422, "UNPROCESSABLE_ENTITY", message


def shown(value: Any) -> str:
    """A value as a message quotes it: compact JSON, cut after 80 characters."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= 80 else text[:80] + "…"


def depth(value: Any) -> int:
    if type(value) is dict:
        return 1 + max(map(depth, value.values()), default=0)
    if type(value) is list:
        return 1 + max(map(depth, value), default=0)
    return 0


def whole(value: Any) -> bool:
    return type(value) is int and value >= 1


def model(metadata: Any, has_primary: bool) -> tuple[int | None, Refusal]:
    """(rank count, None) when the upload is accepted, (None, refusal) when it is refused:
    the seed page's rules, in SPEC 4's order."""
    if metadata is None:
        metadata = {}
    if type(metadata) is not dict:
        return None, refused(f"workloadMetadata must be an object or null, got {shown(metadata)}")
    parts = {}
    for name in ("shape", "parallelism"):
        value = metadata.get(name)
        if value is not None and type(value) is not dict:
            return None, refused(
                f"workloadMetadata.{name} must be an object or null, got {shown(value)}"
            )
        parts[name] = value or {}
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size > 65_536:
        return None, refused(
            f"workloadMetadata is larger than 65,536 bytes when serialized: {size:,} bytes"
        )
    declared, message = rank_count_model(parts["shape"], parts["parallelism"])
    if message is not None:
        return None, refused(message)
    if declared is None and has_primary:
        return None, refused(MISSING)
    return declared, None


def rank_count_model(
    shape: dict[str, Any], parallelism: dict[str, Any]
) -> tuple[int | None, str | None]:
    """The rank count the camelCase members declare, or the message saying why they
    declare none validly (the seed page's rules 3 to 6)."""
    rank_count = shape.get("rankCount")
    if rank_count is not None and not whole(rank_count):
        return None, (
            "workloadMetadata.shape.rankCount must be a whole number of at least 1,"
            f" got {shown(rank_count)}"
        )
    product = None
    for name in DEGREES:
        degree = parallelism.get(name)
        if degree is None:
            continue
        if not whole(degree):
            return None, (
                f"workloadMetadata.parallelism.{name} must be a whole number of at least 1,"
                f" got {shown(degree)}"
            )
        product = degree if product is None else product * degree
    if rank_count is not None and rank_count > LIMIT:
        return None, (
            "workloadMetadata.shape.rankCount must be at most 2,147,483,647,"
            f" got {shown(rank_count)}"
        )
    if product is not None and product > LIMIT:
        return None, (
            f"{PRODUCT} of workloadMetadata.parallelism must be at most 2,147,483,647,"
            f" got {shown(product)}"
        )
    if rank_count is not None and product is not None and rank_count != product:
        return None, (
            f"workloadMetadata.shape.rankCount {rank_count} differs from"
            f" the parallelism product {product} (dp × tp × sp × ep × pp)"
        )
    return (rank_count if rank_count is not None else product), None


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


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=metadata_values, has_primary=st.booleans())
def test_the_rules_give_the_models_verdict(metadata: Any, has_primary: bool) -> None:
    rank_count, refusal = model(metadata, has_primary)
    verdict_event(refusal)
    try:
        derived = check_upload_metadata(metadata, has_primary_files=has_primary)
    except ValidationError as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert (exc.status, exc.code, exc.message) == refusal
    else:
        assert refusal is None, f"accepted {metadata!r}; the model says {refusal!r}"
        assert derived == rank_count


def verdict_event(refusal: Refusal) -> None:
    """Name the rule a case ends at (``--hypothesis-show-statistics`` tallies them)."""
    if refusal is None:
        event("accepted")
    else:
        event(" ".join(word for word in refusal[2].split()[:4] if not word[0].isdigit()))


def answered(response: Any) -> Refusal:
    if response.status_code == 200:
        return None
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


@seed(15)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(metadata=metadata_values)
def test_the_service_gives_the_models_verdict(http: TestClient, metadata: Any) -> None:
    body: dict[str, Any] = {
        "name": "property",
        "files": [{"name": "rank_0.json", "size": 2, "role": "primary"}],
        "workloadMetadata": metadata,
    }
    rank_count, refusal = model(metadata, True)
    if depth(body) > 64:
        refusal = refused(TOO_DEEP)
    verdict_event(refusal)
    response = http.post("/api/v1/tracesets/upload-url", json=body)
    assert answered(response) == refusal, response.text
    if refusal is None:
        traceset = http.get(f"/api/v1/tracesets/{response.json()['tracesetId']}").json()
        assert traceset["rankCountDerived"] == rank_count
        assert traceset["workloadMetadata"] == metadata


TEXTS = ["workload_family", "workload_name", "model_name", "precision", "accelerator"]
SHAPE_NUMBERS = ["rank_count", "global_batch_size", "seq_len", "num_microbatches", "training_steps"]
PROMOTION_DEGREES = [*DEGREES, "cp", "fsdp"]


def numbers_refusal(member: str, value: Any, names: list[str]) -> str | None:
    """Why ``value`` is not an object whose ``names`` are whole numbers (first one first)."""
    if type(value) is not dict:
        return f"workloadMetadata.{member} must be an object or null, got {shown(value)}"
    for name in names:
        number = value.get(name)
        if number is not None and not whole(number):
            return (
                f"workloadMetadata.{member}.{name} must be a whole number of at least 1,"
                f" got {shown(number)}"
            )
    return None


def promotion_model(metadata: Any, held: int | None) -> Refusal:
    """None when promotion accepts ``metadata`` for traceset ts_x holding rank count
    ``held``, else its refusal: SPEC 6's rules, member by member in the typed model's
    order, then the rank-count guard."""
    if type(metadata) is not dict:
        return unprocessable(f"workloadMetadata must be an object, got {shown(metadata)}")
    for name in TEXTS:
        text = metadata.get(name)
        if text is not None and type(text) is not str:
            return unprocessable(f"workloadMetadata.{name} must be a string, got {shown(text)}")
    shape, parallelism = metadata.get("shape"), metadata.get("parallelism")
    if shape is not None:
        message = numbers_refusal("shape", shape, SHAPE_NUMBERS)
        if message:
            return unprocessable(message)
        declared, given = shape.get("rankCount"), shape.get("rank_count")
        if given is not None and type(declared) is int and given != declared:
            return unprocessable(
                f"workloadMetadata.shape.rank_count {given} differs from"
                f" workloadMetadata.shape.rankCount {declared}"
            )
    product = None
    if parallelism is not None:
        message = numbers_refusal("parallelism", parallelism, PROMOTION_DEGREES)
        if message:
            return unprocessable(message)
        degrees = [parallelism[d] for d in DEGREES if parallelism.get(d) is not None]
        if not degrees:
            return unprocessable(
                "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp,"
                f" got {shown(parallelism)}"
            )
        product = 1
        for degree in degrees:
            product *= degree
        dp, fsdp = parallelism.get("dp"), parallelism.get("fsdp")
        if fsdp is not None and (dp or 1) % fsdp:
            of = f"dp {dp}" if dp is not None else "dp, which is 1 when absent"
            return unprocessable(f"workloadMetadata.parallelism.fsdp {fsdp} must divide {of}")
    given = shape.get("rank_count") if shape else None
    if given is not None and product is not None and given != product:
        return unprocessable(
            f"workloadMetadata.shape.rank_count {given} differs from"
            f" the parallelism product {product} (dp × tp × sp × ep × pp)"
        )
    declared_count, message = rank_count_model(shape or {}, parallelism or {})
    if message is not None:
        return unprocessable(message)
    if declared_count != held:
        declares = "no rank count" if declared_count is None else f"rank count {declared_count}"
        holds = "no rank count" if held is None else str(held)
        return unprocessable(
            f"workloadMetadata declares {declares}, but traceset ts_x holds {holds};"
            " a rank count cannot be changed after upload"
        )
    return None


def promote_route_model(metadata: Any, held: int | None) -> Refusal:
    """The promote route's verdict: the body's nesting, the size rule, then the rules."""
    if 1 + depth(metadata) > 64:
        return refused(TOO_DEEP)
    if type(metadata) is dict:
        size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
        if size > 65_536:
            return unprocessable(
                f"workloadMetadata is larger than 65,536 bytes when serialized: {size:,} bytes"
            )
    return promotion_model(metadata, held)


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


def declared_by(metadata: Any) -> int | None:
    """The count ``metadata`` declares by the upload rules (so the guard lets it pass)."""
    parts = metadata if type(metadata) is dict else {}
    shape, parallelism = parts.get("shape"), parts.get("parallelism")
    return rank_count_model(
        shape if type(shape) is dict else {},
        parallelism if type(parallelism) is dict else {},
    )[0]


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=promotion_metadata, held=st.sampled_from(["declared", None, 1, 8, 64]))
def test_promotion_gives_the_models_verdict(metadata: Any, held: Any) -> None:
    if held == "declared":
        held = declared_by(metadata)
    refusal = promotion_model(metadata, held)
    verdict_event(refusal)
    try:
        check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=held)
    except UnprocessableEntity as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert (exc.status, exc.code, exc.message) == refusal
    else:
        assert refusal is None, f"accepted {metadata!r}; the model says {refusal!r}"


HELD_UPLOADS: dict[Any, tuple[dict[str, tuple[bytes, str]], Any]] = {
    None: ({"notes.txt": (b"no ranks", "supporting")}, None),
    1: ({"rank_0.json": (b"{}", "primary")}, {"shape": {"rankCount": 1}}),
    8: (
        {f"rank_{i}.json": (b"{}", "primary") for i in range(8)},
        {"parallelism": {"dp": 8}},
    ),
}


@seed(15)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    metadata=promotion_metadata.filter(lambda value: value is not None),
    held=st.sampled_from([None, 1, 8]),
)
def test_the_promote_route_gives_the_models_verdict(
    http: TestClient, metadata: Any, held: Any
) -> None:
    # A fresh ready traceset per case: a promoted one would answer "already there".
    files, stored = HELD_UPLOADS[held]
    traceset_id = upload(http, files, stored)["id"]
    refusal = promote_route_model(metadata, held)
    verdict_event(refusal)
    if refusal is not None:
        status, code, message = refusal
        refusal = status, code, message.replace("traceset ts_x", f"traceset {traceset_id}")
    response = http.post(
        f"/api/v1/tracesets/{traceset_id}/promote",
        json={"target": "tenant", "workloadMetadata": metadata},
    )
    assert answered(response) == refusal, response.text
    if refusal is None:
        assert response.json()["promotionApplied"] is True
        promoted = http.get(f"/api/v1/tracesets/{traceset_id}").json()
        assert promoted["scope"] == "tenant"
        assert promoted["workloadMetadata"] == metadata
