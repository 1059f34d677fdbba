"""workloadMetadata on the wire: the models that document it in the OpenAPI description (the
seed's schema), the member that takes it as any JSON for the metadata rules to judge, and a
model written as its wire JSON with that member exactly as given."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from tracestore import jsontext
from tracestore.metadata import MAX_RANK_COUNT
from tracestore.schemas.wire import WireModel


class WorkloadShape(WireModel):
    """Workload scale. Other members of shape are stored and returned as given."""

    model_config = ConfigDict(extra="allow")
    rankCount: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RANK_COUNT,
        description="Total rank count. When parallelism degrees are also given, "
        "their product must equal it",
    )


class WorkloadParallelism(WireModel):
    """Parallelism degrees; the rank count is dp × tp × sp × ep × pp (absent = 1)."""

    model_config = ConfigDict(extra="allow")
    dp: int | None = Field(default=None, ge=1, description="Data parallelism degree")
    tp: int | None = Field(default=None, ge=1, description="Tensor parallelism degree")
    sp: int | None = Field(default=None, ge=1, description="Sequence parallelism degree")
    ep: int | None = Field(default=None, ge=1, description="Expert parallelism degree")
    pp: int | None = Field(default=None, ge=1, description="Pipeline parallelism degree")
    # Any JSON: upload stores them unchecked (the seed), so the description may not say
    # integer (schema fuzzing sent a string and was, rightly, answered 200).
    cp: Any = Field(
        default=None,
        description="Context parallelism degree (an integer, at least 1); not a factor of "
        "the rank count, not checked at upload (promotion checks it)",
    )
    fsdp: Any = Field(
        default=None,
        description="Fully sharded data parallel degree (an integer, at least 1); divides dp, "
        "not a factor of the rank count, not checked at upload (promotion checks it)",
    )


class UploadWorkloadMetadata(WireModel):
    """What was traced. Stored and returned as given (up to 65,536 bytes serialized); upload
    validates only the rank-count members. Descriptive members (workload_family, precision,
    ...) are read in snake_case by promotion and the list filters."""

    model_config = ConfigDict(extra="allow")
    shape: WorkloadShape | None = None
    parallelism: WorkloadParallelism | None = None


class WorkloadMetadata(UploadWorkloadMetadata):
    """The name clients generated from an earlier OpenAPI description use for
    UploadWorkloadMetadata; the JSON is the same."""


_METADATA_SCHEMA = WithJsonSchema(
    {
        "anyOf": [
            {"$ref": "#/components/schemas/UploadWorkloadMetadata"},
            {"type": "null"},
        ]
    }
)
# Any JSON at parse time: the metadata rules, not pydantic, judge it and word the errors.
MetadataField = Annotated[Any, _METADATA_SCHEMA]
_METADATA_MEMBER = "workload_metadata"


def wire_dict(model: BaseModel, *, exclude_none: bool = False) -> dict[str, Any]:
    """``model`` as its wire JSON (camelCase members), its workloadMetadata exactly as given.

    pydantic's JSON mode turns a ``jsontext.RawNumber`` into a float and a ``RawJSON`` into
    a string; the member is put back as the model holds it, for ``jsontext.dumps`` to write
    as it was written.
    """
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)
    if _METADATA_MEMBER in type(model).model_fields:
        value = getattr(model, _METADATA_MEMBER)
        if value is not None or not exclude_none:
            data["workloadMetadata"] = value
    return data


def wire_json(model: BaseModel) -> str:
    """``wire_dict``'s JSON text, written by pydantic's own (compiled) serializer with the
    workloadMetadata text spliced in as given: the GET path's rendering, where writing the
    whole model through ``jsontext.dumps`` cost more than the database."""
    if _METADATA_MEMBER not in type(model).model_fields:
        return model.model_dump_json(by_alias=True)
    text = model.model_dump_json(by_alias=True, exclude={_METADATA_MEMBER})
    metadata = jsontext.dumps(getattr(model, _METADATA_MEMBER))
    separator = "," if text != "{}" else ""
    return f'{text[:-1]}{separator}"workloadMetadata":{metadata}}}'
