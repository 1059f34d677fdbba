"""The answers about tracesets: a traceset with its files, a page of the listing, a download URL,
the validation and resolve answers (docs/api.md), and promotion's request and answer
(docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from tracestore.choices import CensusVerdict
from tracestore.schemas.inspection import Inspection
from tracestore.schemas.wire import (
    NUL_FREE,
    MetadataStatus,
    Pagination,
    RequestModel,
    Role,
    Scope,
    SnakeWireModel,
    Status,
    Text,
    Timestamp,
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
    created_at: Timestamp
    updated_at: Timestamp
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
        """When the traceset goes and how to keep it, in words (``never expires`` once
        promoted): every traceset but a promoted one expires ``ttl_days`` after its last use."""
        if self.expires_at is None:
            return "never expires"
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


class PromoteAnswer(WireModel):
    """Body of a promotion's answer."""

    id: str
    scope: Scope
    promotion_applied: bool
