"""The workloadMetadata rules: what upload checks (400) and what promotion checks (422).

Pure functions over plain JSON data (what ``json.loads`` or ``tracestore.jsontext.loads``
gives), shared by the server, the client and the command line. Upload reads only the
rank-count members, in camelCase; promotion reads the whole object through a typed model
whose descriptive members are snake_case.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    Strict,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from tracestore.errors import UnprocessableEntity, ValidationError
from tracestore.jsontext import lone_surrogate, value_text

# The parallelism degrees whose product is the rank count, in the order messages name them.
DEGREES: tuple[str, ...] = ("dp", "tp", "sp", "ep", "pp")
MAX_RANK_COUNT = 2_147_483_647
MAX_METADATA_BYTES = 65_536
MISSING_RANK_COUNT_MESSAGE = (
    "Uploads with primary trace files must declare a rank count: "
    "set workloadMetadata.shape.rankCount, "
    f"or workloadMetadata.parallelism degrees ({', '.join(DEGREES)})"
)

_ROOT = "workloadMetadata"
_SHAPE = f"{_ROOT}.shape"
_PARALLELISM = f"{_ROOT}.parallelism"
_FORMULA = " × ".join(DEGREES)
_PRODUCT = f"the parallelism product ({_FORMULA})"
_SHOWN_CHARS = 80
_RULE_ERROR = "promotion_rule"


def _shown(value: object) -> str:
    """A value as JSON text for a message, cut to a readable length."""
    try:
        text = value_text(value)
    except (ValueError, RecursionError):
        # An int past Python's digit limit (a product of huge degrees), or absurd nesting.
        if isinstance(value, int):
            text = f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
        else:
            text = f"a deeply nested {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"


# ---------------------------------------------------------------------------------------
# Upload


def metadata_size(metadata: object) -> int:
    """Bytes of ``metadata`` as compact JSON with non-ASCII kept as UTF-8."""
    return len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())


def check_metadata_size(metadata: object) -> None:
    """The size rule (promotion's too): at most
    ``MAX_METADATA_BYTES`` serialized. Raises ``ValidationError`` naming the size."""
    try:
        size = metadata_size(metadata)
    except UnicodeEncodeError:
        raise ValidationError(_surrogate_problem(metadata)) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(f"{_ROOT} cannot be serialized as JSON: {exc}") from exc
    if size > MAX_METADATA_BYTES:
        raise ValidationError(
            f"{_ROOT} is larger than {MAX_METADATA_BYTES:,} bytes when serialized: {size:,} bytes"
        )


def _surrogate_problem(metadata: object) -> str:
    """Which member holds a lone surrogate (JSON's ``"\\ud800"``: no Unicode text can), the
    first in the text's order (a member's name before its value), named as the rules name
    members; sought only once the metadata could not be written as UTF-8."""
    # (path, text or value, whether it is a member's name), popped in the text's order.
    pending: list[tuple[str, object, bool]] = [(_ROOT, metadata, False)]
    while pending:
        path, value, is_name = pending.pop()
        if isinstance(value, str) and (found := lone_surrogate(value)):
            what = f"{path} has a member name holding" if is_name else f"{path} holds"
            return f"{what} a lone surrogate ({found}), which is not Unicode text"
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                pending += [(f"{path}.{key}", item, False), (path, key, True)]
        elif isinstance(value, list):
            pending += [
                (f"{path}[{i}]", item, False) for i, item in reversed(list(enumerate(value)))
            ]
    return f"{_ROOT} holds a lone surrogate, which is not Unicode text"


def _member_objects(metadata: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rule 1: ``(shape, parallelism)`` as dicts, empty when absent or null."""
    if metadata is None:
        return {}, {}
    if not isinstance(metadata, dict):
        raise ValidationError(f"{_ROOT} must be an object or null, got {_shown(metadata)}")
    members: list[dict[str, Any]] = []
    for name in ("shape", "parallelism"):
        value = metadata.get(name)
        if value is not None and not isinstance(value, dict):
            raise ValidationError(f"{_ROOT}.{name} must be an object or null, got {_shown(value)}")
        members.append(value or {})
    return members[0], members[1]


def _whole_number(path: str, value: object) -> int:
    # bool is an int in Python, and a RawNumber (2.0, 1e3) is a float: both are refused.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValidationError(f"{path} must be a whole number of at least 1, got {_shown(value)}")


def declared_rank_count(metadata: object) -> int | None:
    """The rank count ``metadata`` declares through ``shape.rankCount`` or the degrees.

    Applies upload's rank rules (not the size rule, not the missing-declaration
    rule) and returns None when nothing is declared. Raises ``ValidationError`` naming the
    member and the value.
    """
    shape, parallelism = _member_objects(metadata)
    raw_rank_count = shape.get("rankCount")
    rank_count = (
        None if raw_rank_count is None else _whole_number(f"{_SHAPE}.rankCount", raw_rank_count)
    )
    degrees = [
        _whole_number(f"{_PARALLELISM}.{name}", parallelism[name])
        for name in DEGREES
        if parallelism.get(name) is not None
    ]
    product = math.prod(degrees) if degrees else None

    if rank_count is not None and rank_count > MAX_RANK_COUNT:
        raise ValidationError(
            f"{_SHAPE}.rankCount must be at most {MAX_RANK_COUNT:,}, got {_shown(rank_count)}"
        )
    if product is not None and product > MAX_RANK_COUNT:
        raise ValidationError(
            f"{_PRODUCT} of {_PARALLELISM} must be at most {MAX_RANK_COUNT:,}, "
            f"got {_shown(product)}"
        )
    if rank_count is not None and product is not None and rank_count != product:
        raise ValidationError(
            f"{_SHAPE}.rankCount {rank_count} differs from the parallelism product {product}"
            f" ({_FORMULA})"
        )
    return rank_count if rank_count is not None else product


def check_upload_metadata(metadata: object, *, has_primary_files: bool) -> int | None:
    """Check ``workloadMetadata`` of an upload (upload's rules, in order).

    Returns the declared rank count (the traceset's ``rankCountDerived``) or None; raises
    ``ValidationError`` (400) for the first rule broken.
    """
    _member_objects(metadata)
    check_metadata_size(metadata)
    rank_count = declared_rank_count(metadata)
    if rank_count is None and has_primary_files:
        raise ValidationError(MISSING_RANK_COUNT_MESSAGE)
    return rank_count


# ---------------------------------------------------------------------------------------
# Promotion (docs/api.md)

_Whole = Annotated[int, Strict(), Field(ge=1)]
_Text = Annotated[str, Strict()]


def _rule_error(message: str) -> PydanticCustomError:
    # The message travels in the context so that braces in values are never read as a template.
    return PydanticCustomError(_RULE_ERROR, "{message}", {"message": message})


class PromotionShape(BaseModel):
    """``workloadMetadata.shape`` as promotion reads it; other members are kept as given."""

    model_config = ConfigDict(defer_build=True, extra="allow")

    rank_count: _Whole | None = None
    global_batch_size: _Whole | None = None
    seq_len: _Whole | None = None
    num_microbatches: _Whole | None = None
    training_steps: _Whole | None = None

    @model_validator(mode="after")
    def _rank_count_matches_declaration(self) -> PromotionShape:
        declared = (self.model_extra or {}).get("rankCount")
        # An invalid rankCount is left to the rank-count guard, which names it.
        valid = isinstance(declared, int) and not isinstance(declared, bool)
        if self.rank_count is not None and valid and self.rank_count != declared:
            raise _rule_error(
                f"{_SHAPE}.rank_count {self.rank_count} differs from {_SHAPE}.rankCount {declared}"
            )
        return self


class PromotionParallelism(BaseModel):
    """``workloadMetadata.parallelism`` as promotion reads it; other members kept as given."""

    model_config = ConfigDict(defer_build=True, extra="allow")

    dp: _Whole | None = None
    tp: _Whole | None = None
    sp: _Whole | None = None
    ep: _Whole | None = None
    pp: _Whole | None = None
    cp: _Whole | None = None
    fsdp: _Whole | None = None

    @property
    def product(self) -> int | None:
        """dp × tp × sp × ep × pp over the degrees given, or None when none is given."""
        given: list[int | None] = [getattr(self, name) for name in DEGREES]
        degrees = [d for d in given if d is not None]
        return math.prod(degrees) if degrees else None

    @model_validator(mode="wrap")
    @classmethod
    def _degrees_are_consistent(
        cls, data: Any, handler: ModelWrapValidatorHandler[PromotionParallelism]
    ) -> PromotionParallelism:
        # Wrapped so that the members' own errors come first and the message shows the
        # object as given (nulls, extras and their order included).
        parallelism = handler(data)
        if parallelism.product is None:
            raise _rule_error(
                f"{_PARALLELISM} must hold at least one of {', '.join(DEGREES)}, got {_shown(data)}"
            )
        dp, fsdp = parallelism.dp, parallelism.fsdp
        if fsdp is not None and (1 if dp is None else dp) % fsdp:
            dp_text = f"dp {dp}" if dp is not None else "dp, which is 1 when absent"
            raise _rule_error(f"{_PARALLELISM}.fsdp {fsdp} must divide {dp_text}")
        return parallelism


class PromotionMetadata(BaseModel):
    """workloadMetadata as promotion reads it (docs/api.md): snake_case descriptive members.

    Unknown members (camelCase spellings such as ``workloadFamily`` included) are allowed
    and kept in ``model_extra``; JSON null counts as absent.
    """

    model_config = ConfigDict(defer_build=True, extra="allow", protected_namespaces=())

    workload_family: _Text | None = None
    workload_name: _Text | None = None
    model_name: _Text | None = None
    precision: _Text | None = None
    accelerator: _Text | None = None
    shape: PromotionShape | None = None
    parallelism: PromotionParallelism | None = None

    @model_validator(mode="after")
    def _rank_count_matches_product(self) -> PromotionMetadata:
        rank_count = self.shape.rank_count if self.shape else None
        product = self.parallelism.product if self.parallelism else None
        if rank_count is not None and product is not None and rank_count != product:
            raise _rule_error(
                f"{_SHAPE}.rank_count {rank_count} differs from the parallelism product"
                f" {product} ({_FORMULA})"
            )
        return self


_EXPECTED_BY_ERROR_TYPE = {
    "string_type": "a string",
    "model_type": "an object or null",
    "model_attributes_type": "an object or null",
    "dict_type": "an object or null",
}


def _promotion_message(error: ErrorDetails) -> str:
    """One pydantic error as a tracestore message: full member path and JSON value."""
    if error["type"] == _RULE_ERROR:
        return str((error.get("ctx") or {})["message"])
    path = ".".join([_ROOT, *(str(part) for part in error["loc"])])
    expected = _EXPECTED_BY_ERROR_TYPE.get(error["type"], "a whole number of at least 1")
    return f"{path} must be {expected}, got {_shown(error['input'])}"


# ---------------------------------------------------------------------------------------
# Near misses: members spelled near one the rules read (``shape.rank_count``, ``DP``)

MAX_NEAR_MISSES = 5
_DECLARATIONS = frozenset({"rankCount", *DEGREES})
_READ_AT_TOP = ("workload_family", "workload_name", "model_name", "precision", "accelerator")
_READ_IN_SHAPE: tuple[str, ...] = ("rankCount", "rank_count", "global_batch_size", "seq_len")
_READ_IN_SHAPE += ("num_microbatches", "training_steps")
_READ_IN_PARALLELISM = (*DEGREES, "cp", "fsdp")


def _squashed(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def _near_member(key: str, read: Sequence[str], given: Mapping[str, Any]) -> str | None:
    """The member of ``read`` that ``key`` looks like a misspelling of, absent from
    ``given``: the same letters in another case or separation, else (names of 4 or more
    letters) a close match. A member the rules read is a near miss only of a declaration
    (``rank_count``, which promotion reads, is not upload's ``rankCount``)."""
    absent = [m for m in read if m not in given and m != key]
    same = [m for m in absent if _squashed(m) == _squashed(key)]
    if key in read:
        same = [m for m in same if m in _DECLARATIONS]
        return same[0] if same else None
    if same:
        return same[0]
    if len(key) < 4:
        return None
    close = difflib.get_close_matches(_squashed(key), [_squashed(m) for m in absent], 1, 0.85)
    return next((m for m in absent if close and _squashed(m) == close[0]), None)


def near_misses(metadata: object) -> list[str]:
    """What a workloadMetadata spells near a member the rules read (the seed's declaration
    members, promotion's snake_case members), in words: ``workloadMetadata.shape.rank_count
    is not read as a declaration of the rank count: did you mean `rankCount`?``. At most
    ``MAX_NEAR_MISSES``; nothing for a value that is no object."""
    if not isinstance(metadata, dict):
        return []
    places: list[tuple[str, Mapping[str, Any], Sequence[str]]] = [
        (_ROOT, metadata, (*_READ_AT_TOP, "shape", "parallelism"))
    ]
    for name, members in (("shape", _READ_IN_SHAPE), ("parallelism", _READ_IN_PARALLELISM)):
        if isinstance(metadata.get(name), dict):
            places.append((f"{_ROOT}.{name}", metadata[name], members))
    hints: list[str] = []
    for path, given, read in places:
        for key in given:
            meant = _near_member(key, read, given) if isinstance(key, str) else None
            if meant is None:
                continue
            what = (
                "is not read as a declaration of the rank count"
                if meant in _DECLARATIONS
                else "is not a member the rules read"
            )
            hints.append(f"{path}.{_shown_key(key)} {what}: did you mean `{meant}`?")
            if len(hints) == MAX_NEAR_MISSES:
                return hints
    return hints


def _shown_key(key: str) -> str:
    return key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS] + "…"


def check_promotion_metadata(
    metadata: object, *, traceset_id: str, held_rank_count: int | None
) -> PromotionMetadata:
    """Check the metadata a promotion would store (docs/api.md) and return its typed reading.

    The typed model's checks come first, then the rank-count guard: the count declared by
    the upload rules must equal ``held_rank_count`` (None for none). Raises
    ``UnprocessableEntity`` (422) naming the member and the value.
    """
    if not isinstance(metadata, dict):
        raise UnprocessableEntity(f"{_ROOT} must be an object, got {_shown(metadata)}")
    try:
        model = PromotionMetadata.model_validate(metadata)
    except PydanticValidationError as exc:
        raise UnprocessableEntity(_promotion_message(exc.errors()[0])) from None
    try:
        declared = declared_rank_count(metadata)
    except ValidationError as exc:
        raise UnprocessableEntity(exc.message) from exc
    if declared != held_rank_count:
        declares = "no rank count" if declared is None else f"rank count {declared}"
        holds = "no rank count" if held_rank_count is None else str(held_rank_count)
        hints = [hint for hint in near_misses(metadata) if "declaration" in hint]
        meant = f" ({'; '.join(hints)})" if hints else ""
        raise UnprocessableEntity(
            f"{_ROOT} declares {declares}, but traceset {traceset_id} holds {holds};"
            f" a rank count cannot be changed after upload{meant}"
        )
    return model


def promotion_refusal(metadata: object, declared: int | None) -> str | None:
    """What promotion's typed model will refuse in an upload's accepted workloadMetadata
    (declaring ``declared``), in words; None when promotion takes it as it is. Upload stores
    every member it does not check as given (the seed), so this is a warning, never a 400."""
    if not isinstance(metadata, dict):
        return None
    try:
        check_promotion_metadata(metadata, traceset_id="(this upload)", held_rank_count=declared)
    except UnprocessableEntity as exc:
        return f"stored as given, but promotion will refuse it: {exc.message}"
    return None


def upload_warnings(metadata: object, declared: int | None) -> list[str]:
    """What an accepted upload's workloadMetadata holds that will not work as meant: the
    members spelled near one the rules read (``near_misses``), then what promotion will
    refuse (``promotion_refusal``). upload-url answers them as ``warnings``."""
    refusal = promotion_refusal(metadata, declared)
    return near_misses(metadata) + ([refusal] if refusal else [])
