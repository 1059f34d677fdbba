"""What every wire model builds on: the base models (camelCase JSON, snake_case Python; strict
requests), the types members share (timestamps, roles, statuses, scopes), the NUL check stored
texts pass, and the answers every part of the API shares (a page's pagination, the error
envelope, health)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from tracestore.choices import SCOPES as SCOPES
from tracestore.choices import STATUSES as STATUSES
from tracestore.choices import Scope as Scope
from tracestore.choices import Status as Status
from tracestore.jsontext import lone_surrogate

Role = Literal["primary", "supporting"]
MetadataStatus = Literal["pending", "complete", "failed"]


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, millisecond precision."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Timestamp = Annotated[
    datetime,
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


# Every model builds its validator at its first use, not at import: a command of the CLI
# uses a few of them, and building all cost it ~25 ms of its start (bench/cli_start.py).
class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)


class RequestModel(WireModel):
    # Built at import: FastAPI wraps a request body's model in a field of its own, which
    # pydantic warns about when the model's build was deferred.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        extra="ignore",
        defer_build=False,
    )


class SnakeWireModel(BaseModel):
    """A wire model whose JSON members are snake_case (the resolve answer)."""

    model_config = ConfigDict(populate_by_name=True, defer_build=True)


def without_nul(value: Any, info: ValidationInfo) -> Any:
    """A stored text member (or list of them) that holds no U+0000: PostgreSQL's text
    cannot, and a stored text must read back as it was given on every engine."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        raise ValueError(
            f"{info.field_name} contains a NUL character (U+0000), which is not allowed"
        )
    return value


# The pydantic error type of a string holding a lone surrogate (``validation`` words it).
NOT_UNICODE = "not_unicode_text"


def _unicode_text(value: str) -> str:
    surrogate = lone_surrogate(value)
    if surrogate is not None:
        raise PydanticCustomError(
            NOT_UNICODE,
            "holds a lone surrogate ({surrogate}), which is not Unicode text",
            {"surrogate": surrogate},
        )
    return value


# Every string member of a request body: a lone surrogate is refused naming the member
# (it reached the database's driver or the error's encoder, a 500).
Text = Annotated[str, AfterValidator(_unicode_text)]


def integral(value: Any) -> Any:
    """A whole float as an int: JSON Schema's integer is any whole number (5.0, 5e0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer member of a request body, as the OpenAPI description's "integer" means it.
Integer = Annotated[int, BeforeValidator(integral)]


# The description of a stored text member: without_nul refuses a U+0000 in it.
NUL_FREE: dict[str, JsonValue] = {"pattern": "^[^\\x00]*$"}
SHA256_HEX: dict[str, JsonValue] = {"pattern": "^[0-9a-fA-F]{64}$"}

# A traceset's name, description and tags, as upload-url and PATCH take them.
TracesetName = Annotated[Text, Field(min_length=1, max_length=255, json_schema_extra=NUL_FREE)]
TracesetDescription = Annotated[Text, Field(max_length=4096, json_schema_extra=NUL_FREE)]
Tag = Annotated[Text, Field(min_length=1, max_length=64, json_schema_extra=NUL_FREE)]
MAX_TAGS = 64


class Pagination(WireModel):
    count: int
    has_more: bool
    next_cursor: str | None = None


class ErrorDetail(WireModel):
    code: str
    message: str
    request_id: str


class ErrorEnvelope(WireModel):
    error: ErrorDetail


class Health(WireModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
