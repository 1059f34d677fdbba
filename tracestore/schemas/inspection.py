"""A traceset's ``inspection`` member, typed (docs/inspection.md): its status, the rank census
and its checks, which tools can read the set, and what each file holds.

Every model keeps the members the server adds later (``extra="allow"``, reached through
``model_extra``) and writes back exactly what it read: the members it was given, in their
order, and none it was not (``Recorded``), so a traceset's JSON reads back as stored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel


class Recorded(BaseModel):
    """A recorded JSON object read through a model: typed where tracestore reads it, every
    other member kept, written back with the members it was given in their order."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, defer_build=True, extra="allow"
    )
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ModelWrapValidatorHandler[Recorded]) -> Recorded:
        model = handler(data)
        if isinstance(data, dict):
            model._order = tuple(str(key) for key in data)
        return model

    @model_serializer(mode="wrap")
    def _as_recorded(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        fields = type(self).model_fields
        key = {
            name: (field.alias or name) if info.by_alias else name for name, field in fields.items()
        }
        unset = {key[name] for name in fields if name not in self.model_fields_set}
        written = {k: v for k, v in data.items() if k not in unset}
        if not self._order:
            return written
        by_alias = {(field.alias or name): key[name] for name, field in fields.items()}
        order = [by_alias.get(k, k) for k in self._order]
        ordered = {k: written[k] for k in order if k in written}
        ordered.update((k, v) for k, v in written.items() if k not in ordered)
        return ordered


class Check(Recorded):
    """A census or readiness check: passed (null: not evaluated), its message, and whether it
    passed with a warning."""

    passed: bool | None = None
    message: str | None = None
    warning: bool = False


class Census(Recorded):
    """The rank census (``inspect.census.RankCensus.to_json``); its lists as recorded."""

    declared_rank_count: int | None = None
    parallelism_product: int | None = None
    expected_rank_count: int | None = None
    expected_from: str | None = None
    ranks_found: list[int] = Field(default_factory=list)
    ranks_missing: list[dict[str, Any]] = Field(default_factory=list)
    missing_count: int = 0
    unranked_files: list[str] = Field(default_factory=list)
    checks: dict[str, Check] = Field(
        default_factory=dict,
        description="rankCountMatches, parallelismConsistent, processGroupsMatch",
    )


class InspectedFile(Recorded):
    """What inspection found in one primary file (``inspect.model.FileInspection``)."""

    name: str
    format: str | None = None
    status: str | None = None
    reason: str | None = None
    rank: int | None = None
    world_size: int | None = None
    rank_source: str | None = None
    rank_provenance: str | None = None


class Inspection(Recorded):
    """A traceset's ``inspection``: ``complete`` with the census, summary, readiness and
    files, or ``failed`` with its reason; ``truncated`` when it was stored shortened."""

    status: Literal["complete", "failed"] | str
    inspected_at: str | None = None
    reason: str | None = None
    census: Census | None = None
    summary: dict[str, Any] | None = None
    readiness: dict[str, Check] | None = Field(
        default=None, description="hta, chakra, astra, perfetto: which tools can read the set"
    )
    files: list[InspectedFile] = Field(default_factory=list)
    truncated: dict[str, Any] | None = None
