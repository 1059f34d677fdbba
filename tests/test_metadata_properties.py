"""Property tests (hypothesis) of the upload metadata rules against a model of them written
here from the seed page (/work/shared/seed/workload-metadata.txt), deliberately simple and
sharing no code with ``tracestore.metadata``: for arbitrary JSON (nested nulls, floats, huge
integers, booleans, strings, unicode, deep nesting) the service's verdict, the rank count it
derives and the start of its message equal the model's, both in the pure rules and through
the upload-url and promote routes. Fixed seed: the same cases every run."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.uploading import upload
from tracestore.errors import UnprocessableEntity, ValidationError
from tracestore.metadata import check_promotion_metadata, check_upload_metadata

LIMIT = 2_147_483_647
DEGREES = ["dp", "tp", "sp", "ep", "pp"]
MISSING = (
    "Uploads with primary trace files must declare a rank count: "
    "set workloadMetadata.shape.rankCount, "
    "or workloadMetadata.parallelism degrees (dp, tp, sp, ep, pp)"
)


def model(metadata: Any, has_primary: bool) -> tuple[int | None, str | None]:
    """(rank count, None) when the upload is accepted, (None, the start of the message)
    when it is refused: the seed page's rules, in its order."""
    if metadata is None:
        metadata = {}
    if type(metadata) is not dict:
        return None, "workloadMetadata must be an object or null"
    parts = {}
    for name in ("shape", "parallelism"):
        value = metadata.get(name)
        if value is not None and type(value) is not dict:
            return None, f"workloadMetadata.{name} must be an object or null"
        parts[name] = value or {}
    text = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > 65_536:
        return None, f"workloadMetadata is {len(text.encode())} bytes when serialized"
    declared, refusal = rank_count_model(parts["shape"], parts["parallelism"])
    if refusal is None and declared is None and has_primary:
        return None, MISSING
    return declared, refusal


def whole(value: Any) -> bool:
    return type(value) is int and value >= 1


def rank_count_model(
    shape: dict[str, Any], parallelism: dict[str, Any]
) -> tuple[int | None, str | None]:
    """The rank count the camelCase members declare, or the start of why they declare none
    validly (the seed page's rules 3 to 6)."""
    parts = {"shape": shape, "parallelism": parallelism}
    rank_count = parts["shape"].get("rankCount")
    if rank_count is not None and not whole(rank_count):
        return None, "workloadMetadata.shape.rankCount must be a whole number of at least 1"
    product = None
    for name in DEGREES:
        degree = parts["parallelism"].get(name)
        if degree is None:
            continue
        if not whole(degree):
            return None, f"workloadMetadata.parallelism.{name} must be a whole number of at least 1"
        product = degree if product is None else product * degree
    if rank_count is not None and rank_count > LIMIT:
        return None, "workloadMetadata.shape.rankCount must be at most 2,147,483,647"
    if product is not None and product > LIMIT:
        return None, "the parallelism product"
    if rank_count is not None and product is not None and rank_count != product:
        return None, f"workloadMetadata.shape.rankCount {rank_count} differs from the parallelism"
    return (rank_count if rank_count is not None else product), None


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.integers(LIMIT - 3, LIMIT + 3),
    st.integers(-(10**40), 10**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 2.0, 8.0, 1e3]),
    st.text(max_size=8),
    st.sampled_from(["4", "8", "ünï", "1e3"]),
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
metadata_values = st.one_of(
    st.none(),
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "shape": members,
            "parallelism": members,
            "workload_family": json_values,
            "nested": st.recursive(
                st.none(), lambda inner: st.lists(inner, max_size=1), max_leaves=30
            ),
            # Unicode, and lengths about the 65,536-byte limit (é is 2 bytes).
            "padding": st.text(max_size=50) | st.integers(32_700, 32_780).map("é".__mul__),
        },
    ),
)


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=metadata_values, has_primary=st.booleans())
def test_the_rules_give_the_models_verdict(metadata: Any, has_primary: bool) -> None:
    rank_count, refusal = model(metadata, has_primary)
    try:
        derived = check_upload_metadata(metadata, has_primary_files=has_primary)
    except ValidationError as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert exc.message.startswith(refusal), (exc.message, refusal)
    else:
        assert refusal is None, f"accepted {metadata!r}; the model says {refusal!r}"
        assert derived == rank_count


@seed(15)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(metadata=metadata_values)
def test_the_service_gives_the_models_verdict(http: TestClient, metadata: Any) -> None:
    rank_count, refusal = model(metadata, True)
    body: dict[str, Any] = {
        "name": "property",
        "files": [{"name": "rank_0.json", "size": 2, "role": "primary"}],
        "workloadMetadata": metadata,
    }
    response = http.post("/api/v1/tracesets/upload-url", json=body)
    if refusal is not None:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"].startswith(refusal)
        return
    assert response.status_code == 200, response.text
    traceset = http.get(f"/api/v1/tracesets/{response.json()['tracesetId']}").json()
    assert traceset["rankCountDerived"] == rank_count
    assert traceset["workloadMetadata"] == metadata


TEXTS = ["workload_family", "workload_name", "model_name", "precision", "accelerator"]
SHAPE_NUMBERS = ["rank_count", "global_batch_size", "seq_len", "num_microbatches", "training_steps"]
PROMOTION_DEGREES = [*DEGREES, "cp", "fsdp"]


def numbers_refusal(member: str, value: Any, names: list[str]) -> str | None:
    """Why ``value`` is not an object whose ``names`` are whole numbers (first one first)."""
    if type(value) is not dict:
        return f"workloadMetadata.{member} must be an object or null"
    for name in names:
        if value.get(name) is not None and not whole(value[name]):
            return f"workloadMetadata.{member}.{name} must be a whole number of at least 1"
    return None


def promotion_model(metadata: Any, held: int | None) -> str | None:
    """None when promotion accepts ``metadata`` for a traceset holding rank count ``held``,
    else the start of its message: SPEC 6's rules, member by member in the model's order."""
    if type(metadata) is not dict:
        return "workloadMetadata must be an object"
    for name in TEXTS:
        if metadata.get(name) is not None and type(metadata[name]) is not str:
            return f"workloadMetadata.{name} must be a string"
    shape, parallelism = metadata.get("shape"), metadata.get("parallelism")
    if shape is not None:
        refusal = numbers_refusal("shape", shape, SHAPE_NUMBERS)
        if refusal:
            return refusal
        declared = shape.get("rankCount")
        given = shape.get("rank_count")
        if given is not None and type(declared) is int and given != declared:
            return "workloadMetadata.shape.rank_count"
    product = None
    if parallelism is not None:
        refusal = numbers_refusal("parallelism", parallelism, PROMOTION_DEGREES)
        if refusal:
            return refusal
        degrees = [parallelism[d] for d in DEGREES if parallelism.get(d) is not None]
        if not degrees:
            return "workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp"
        product = 1
        for degree in degrees:
            product *= degree
        fsdp = parallelism.get("fsdp")
        if fsdp is not None and (parallelism.get("dp") or 1) % fsdp:
            return f"workloadMetadata.parallelism.fsdp {fsdp} must divide dp"
    given = shape.get("rank_count") if shape else None
    if given is not None and product is not None and given != product:
        return f"workloadMetadata.shape.rank_count {given} differs from"
    declared_count, refusal = rank_count_model(shape or {}, parallelism or {})
    if refusal is not None:
        return refusal
    if declared_count != held:
        declares = "no rank count" if declared_count is None else f"rank count {declared_count}"
        return f"workloadMetadata declares {declares}, but traceset ts_x holds"
    return None


small = st.one_of(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8), rank_values)
promotion_metadata = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            **{name: st.one_of(st.text(max_size=8), scalars) for name in TEXTS},
            "shape": st.one_of(
                members,
                st.dictionaries(
                    st.sampled_from([*SHAPE_NUMBERS, "rankCount", "other"]), small, max_size=4
                ),
            ),
            "parallelism": st.one_of(
                members,
                st.dictionaries(st.sampled_from([*PROMOTION_DEGREES, "x"]), small, max_size=4),
            ),
            "workloadFamily": json_values,
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


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=promotion_metadata, held=st.sampled_from(["declared", None, 1, 8, 64]))
def test_promotion_gives_the_models_verdict(metadata: Any, held: Any) -> None:
    if held == "declared":  # the count the metadata declares: the guard lets it pass
        parts = metadata if type(metadata) is dict else {}
        shape, parallelism = parts.get("shape"), parts.get("parallelism")
        held = rank_count_model(
            shape if type(shape) is dict else {},
            parallelism if type(parallelism) is dict else {},
        )[0]
    refusal = promotion_model(metadata, held)
    try:
        check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=held)
    except UnprocessableEntity as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert exc.message.startswith(refusal), (exc.message, refusal)
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
    max_examples=100,
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
    refusal = promotion_model(metadata, held)
    response = http.post(
        f"/api/v1/tracesets/{traceset_id}/promote",
        json={"target": "tenant", "workloadMetadata": metadata},
    )
    if refusal is not None:
        assert response.status_code == 422, response.text
        expected = refusal.replace("traceset ts_x", f"traceset {traceset_id}")
        assert response.json()["error"]["message"].startswith(expected)
        return
    assert response.status_code == 200, response.text
    assert response.json()["promotionApplied"] is True
    promoted = http.get(f"/api/v1/tracesets/{traceset_id}").json()
    assert promoted["scope"] == "tenant"
    assert promoted["workloadMetadata"] == metadata
