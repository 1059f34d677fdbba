"""The answers about tracesets: a traceset with its files, a page of the listing, a download URL,
the validation and resolve answers (docs/api.md), and promotion's request and answer
(docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from tracestore.choices import CensusVerdict
from tracestore.schemas.inspection import Inspection
from tracestore.schemas.wire import (
    MAX_TAGS,
    NUL_FREE,
    MetadataStatus,
    Pagination,
    RequestModel,
    Role,
    Scope,
    SnakeWireModel,
    Status,
    Tag,
    Text,
    Timestamp,
    TracesetDescription,
    TracesetName,
    WireModel,
    format_timestamp,
    without_nul,
)
from tracestore.schemas.workload import MetadataField


class RankRange(WireModel):
    start: int
    end: int


class FileResponse(WireModel):
    name: str
    size: int
    role: Role
    content_type: str | None = None
    hash: str | None = None
    metadata_status: MetadataStatus
    rank_range: RankRange | None = None
    rank_provenance: str | None = Field(
        default=None,
        description="Where inspection found the ranks of rankRange (the record, node or name "
        "pattern), in words; null when none was found or inspection has not finished.",
    )


def _absent_by_default(schema: dict[str, Any]) -> None:
    """A member that may be left out but not be null: its description has no default (a
    null one would not be of its type)."""
    schema.pop("default", None)


# Who uploaded a traceset (createdBy): never null from this service; absent from one older
# than it, which a client must still read.
def _uploader() -> Any:
    return Field(
        default=None,
        description="Who uploaded the traceset (an extension)",
        json_schema_extra=_absent_by_default,
    )


class UserRef(WireModel):
    """A user as a teammate recognises them: their id and their name (an email or a login
    name for a user who signs in through the identity provider)."""

    id: str
    name: str


CENSUS_TEXT = (
    "The rank census judged whole (an extension): fail when any of its checks failed (ranks "
    "missing, duplicated or unranked, degrees or process groups that disagree), pass when "
    "none did, unknown until inspection has recorded it"
)
MISSING_RANKS_TEXT = "How many expected ranks no file holds; null while the census is unknown"


class Traceset(WireModel):
    id: str
    name: str
    description: str | None = None
    tags: list[str]
    status: Status
    scope: Scope
    workspace_id: str
    created_by: UserRef | SkipJsonSchema[None] = _uploader()
    created_at: Timestamp
    updated_at: Timestamp
    edited_at: Timestamp | None = Field(
        default=None,
        description="When its name, description or tags were last edited (PATCH); null "
        "until then (an extension)",
    )
    edited_by: UserRef | None = Field(
        default=None, description="Who made that edit; null until then (an extension)"
    )
    can_edit: bool = Field(
        default=False,
        description="Whether the caller may edit its name, description and tags (PATCH): "
        "its uploader or a tenant admin (an extension)",
    )
    expires_at: Timestamp | None
    ttl_days: int
    rank_count_derived: int | None
    total_size: int
    file_count: int
    hash: str | None
    census: CensusVerdict = Field(default="unknown", description=CENSUS_TEXT)
    missing_ranks: int | None = Field(default=None, description=MISSING_RANKS_TEXT)
    workload_metadata: MetadataField = None
    files: list[FileResponse]
    inspection: Inspection | None = None

    @property
    def expiry(self) -> str:
        """When the traceset goes and how to keep it, in words (``never expires (promoted)`` once
        promoted): every traceset but a promoted one expires ``ttl_days`` after its last use."""
        if self.expires_at is None:
            return "never expires (promoted)"
        return (
            f"expires {format_timestamp(self.expires_at)}, {self.ttl_days} days after its last "
            "use (a download counts); promote it to keep it"
        )


class WorkloadSummary(SnakeWireModel):
    """The descriptive members a list item shows, as stored (snake_case)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")
    workload_family: Any = None
    workload_name: Any = None


class TracesetListItem(WireModel):
    id: str
    name: str
    status: Status
    scope: Scope
    workspace_id: str
    file_count: int
    total_size: int
    rank_count_derived: int | None
    created_at: Timestamp
    created_by: UserRef | SkipJsonSchema[None] = _uploader()
    census: CensusVerdict = Field(default="unknown", description=CENSUS_TEXT)
    missing_ranks: int | None = Field(default=None, description=MISSING_RANKS_TEXT)
    workload: WorkloadSummary = Field(default_factory=WorkloadSummary)


class TracesetPage(WireModel):
    """Body of ``GET /api/v1/tracesets``: one page of tracesets."""

    items: list[TracesetListItem]
    pagination: Pagination


class WholeFile(WireModel):
    """A file a ranks download sends whole, though it holds ranks not asked for."""

    name: str
    ranks: str = Field(description="All the ranks the file holds (0-7)")


class DownloadAnswer(WireModel):
    """Body of ``GET /api/v1/tracesets/{id}/download``: a presigned GET URL."""

    url: str
    expires_at: Timestamp
    file: str | None = Field(default=None, description="The file's name; null for the ZIP")
    ranks: str | None = Field(
        default=None, description="The ranks of a ranks download (0-7,12); null otherwise"
    )
    whole_files: list[WholeFile] = Field(
        default_factory=list,
        description="A ranks download's files that hold ranks not asked for, sent whole (an "
        "archive of every rank cannot be split by rank); an extension",
    )


class ValidationCheck(WireModel):
    name: str
    passed: bool | None = Field(description="null when the check has not been evaluated yet")
    message: str | None = None
    warning: bool = Field(
        default=False,
        description="true when the check passed with a warning (e.g. process groups checked "
        "on a subset of the ranks); the message says what to look at",
    )


class ToolReadiness(WireModel):
    """Whether a tool that consumes traces can read the traceset (an extension)."""

    name: str = Field(description="hta_ready, chakra_ready, astra_ready or perfetto_ready")
    tool: str = Field(description="The tool, in words: HTA, Chakra, ASTRA-sim, Perfetto")
    ready: bool | None = Field(description="null when inspection has not reported yet")
    message: str | None = None


class ValidateAnswer(WireModel):
    """Body of ``POST /api/v1/tracesets/{id}/validate``: ``valid`` and ``checks`` judge the
    traceset itself; ``readiness`` (an extension) says which tools can read it, and does not
    make it invalid."""

    valid: bool
    checks: list[ValidationCheck]
    readiness: list[ToolReadiness] = Field(default_factory=list)


class ResolvedFile(SnakeWireModel):
    name: str
    role: Role
    size: int
    key: str
    uri: str


class ResolveAnswer(SnakeWireModel):
    """Body of ``GET /api/v1/tracesets/{id}/resolve``: where the bytes are (snake_case)."""

    traceset_id: str
    name: str
    layout: Literal["cas"] = "cas"
    files: list[ResolvedFile]
    total_size: int


class PromoteRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/{id}/promote`` (every member optional)."""

    target: Text = Field(
        default="tenant",
        json_schema_extra={"enum": ["tenant", "public"]},  # promotion words a bad one
        description="The scope to promote to, one step up: `tenant` (the default) from "
        "`workspace`, `public` from `tenant` (needs a tenant admin)",
    )
    workload_metadata: MetadataField = Field(
        default=None,
        description="Replaces the stored workloadMetadata (stored exactly as given) when the "
        "promotion succeeds; checked by promotion's typed model and rank-count guard",
    )
    description: Text | None = Field(
        default=None,
        max_length=4096,
        description="Replaces the description on success",
        json_schema_extra=NUL_FREE,
    )
    tags: (
        list[Annotated[Text, Field(min_length=1, max_length=64, json_schema_extra=NUL_FREE)]] | None
    ) = Field(default=None, max_length=64, description="Replace the tags on success")

    force: bool = Field(
        default=False,
        description="Promote even though the traceset fails its census (an extension): "
        "without it, such a promotion answers 409 naming the failed checks",
    )

    _texts_without_nul = field_validator("description", "tags")(without_nul)


def _not_null(value: Any, info: ValidationInfo) -> Any:
    if value is None:
        raise ValueError(f"{to_camel(info.field_name or '')} must not be null")
    return value


# A list of tags, up to a traceset's most.
TagList = Annotated[list[Tag], Field(max_length=MAX_TAGS)]


class EditRequest(RequestModel):
    """Body of ``PATCH /api/v1/tracesets/{id}`` (an extension): the members to change, at
    least one; the rest are kept."""

    # Every constraint inside the member's type: on an Optional, Field(min_length=...)
    # of the union was applied to null (a TypeError, a 500). Absent is not null: only a
    # description may be null (removed); the description of the others has no null.
    name: TracesetName | SkipJsonSchema[None] = Field(
        default=None, description="The new name", json_schema_extra=_absent_by_default
    )
    description: TracesetDescription | None = Field(
        default=None, description="The new description; null removes it"
    )
    tags: TagList | SkipJsonSchema[None] = Field(
        default=None,
        description="Replaces the tags; [] removes them all",
        json_schema_extra=_absent_by_default,
    )
    add_tags: TagList | SkipJsonSchema[None] = Field(
        default=None,
        description="Tags to add (those held are kept)",
        json_schema_extra=_absent_by_default,
    )
    remove_tags: TagList | SkipJsonSchema[None] = Field(
        default=None,
        description="Tags to remove (absent ones are ignored)",
        json_schema_extra=_absent_by_default,
    )

    _given_not_null = field_validator("name", "tags", "add_tags", "remove_tags")(_not_null)
    _texts_without_nul = field_validator("name", "description", "tags", "add_tags", "remove_tags")(
        without_nul
    )


class PromoteAnswer(WireModel):
    """Body of a promotion's answer."""

    id: str
    scope: Scope
    promotion_applied: bool
