"""A model of the upload and promotion metadata rules for the property tests, written here
from the reference API's page on workload metadata and its upload and promotion rules, deliberately
simple and sharing no code with ``tracestore.metadata``. It words every message itself; a
verdict is None when accepted, else (HTTP status, error code, message), and a response is
read as one to compare."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event

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
    the reference's rules, in upload's order."""
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
    declare none validly (the reference's rules 3 to 6)."""
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
    ``held``, else its refusal: promotion's rules, member by member in the typed model's
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
        # The strategies' only near miss of a declaration member: shape.rank_count alone.
        near = isinstance(shape, dict) and "rank_count" in shape and "rankCount" not in shape
        meant = (
            " (workloadMetadata.shape.rank_count is not read as a declaration of the rank"
            " count: did you mean `rankCount`?)"
            if near
            else ""
        )
        return unprocessable(
            f"workloadMetadata declares {declares}, but traceset ts_x holds {holds};"
            f" a rank count cannot be changed after upload{meant}"
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


def declared_by(metadata: Any) -> int | None:
    """The count ``metadata`` declares by the upload rules (so the guard lets it pass)."""
    parts = metadata if type(metadata) is dict else {}
    shape, parallelism = parts.get("shape"), parts.get("parallelism")
    return rank_count_model(
        shape if type(shape) is dict else {},
        parallelism if type(parallelism) is dict else {},
    )[0]


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
