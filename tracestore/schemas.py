"""Wire models shared by the server and the client: camelCase JSON, snake_case Python.

Request models are strict (``"5"`` is not a size, ``2.0`` is not a part number); response
models are what ``GET`` answers and what the client returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel

from tracestore import jsontext
from tracestore.metadata import MAX_RANK_COUNT

MAX_FILE_SIZE = 5 * 1024**4  # 5 TiB, as S3
MAX_NAME_BYTES = 1024
_SEGMENT = re.compile(r"[A-Za-z0-9._+=@-]+")

Role = Literal["primary", "supporting"]
Status = Literal["uploading", "ready", "upload_failed", "deleted"]
Scope = Literal["workspace", "tenant", "public"]
MetadataStatus = Literal["pending", "complete", "failed"]


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, millisecond precision."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Timestamp = Annotated[
    datetime,
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable file name, or None when it is."""
    if not name:
        return "is empty"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if "\\" in name:
        return "contains a backslash"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "contains a control character"
    if name.startswith("/"):
        return "is absolute (starts with '/'); use a relative path"
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            shown = segment or "empty"
            return f"has an {shown} segment" if shown == "empty" else f"has a '{segment}' segment"
        if not _SEGMENT.fullmatch(segment):
            bad = sorted({ch for ch in segment if not _SEGMENT.fullmatch(ch)})
            return f"contains characters outside [A-Za-z0-9._+=@-]: {''.join(bad)!r}"
    return None


def name_collision(names: Iterable[str]) -> str | None:
    """Why two of ``names`` cannot both be files of one directory tree, naming both: one is
    a directory of the other (``a`` and ``a/b``), or they differ only by case (one file on
    a case-insensitive file system); None when no two collide."""
    files: dict[str, str] = {}  # case-folded name -> name
    directories: dict[str, str] = {}  # case-folded directory -> a name inside it
    for name in names:
        key = name.casefold()
        if key in files and files[key] != name:
            return f"File names {files[key]!r} and {name!r} differ only by case"
        if key in directories:
            return _file_and_directory(name, directories[key])
        files[key] = name
        segments = key.split("/")
        for depth in range(1, len(segments)):
            directory = "/".join(segments[:depth])
            if directory in files:
                return _file_and_directory(files[directory], name)
            directories.setdefault(directory, name)
    return None


def _file_and_directory(file: str, inside: str) -> str:
    return f"File names {file!r} and {inside!r} collide: {file!r} cannot be a file and a directory"


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


# --- workloadMetadata, as the OpenAPI description documents it (the seed's schema) ---


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
    cp: int | None = Field(
        default=None,
        description="Context parallelism degree; not a factor of the rank count, "
        "not checked at upload (promotion checks it)",
    )
    fsdp: int | None = Field(
        default=None,
        description="Fully sharded data parallel degree; divides dp, not a factor of the "
        "rank count, not checked at upload (promotion checks it)",
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


# --- upload ---


def sha256_hex(value: str | None) -> str | None:
    """A declared SHA-256: 64 hexadecimal characters, kept in lower case."""
    if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise ValueError(f"sha256 must be 64 hexadecimal characters, got {value!r}")
    return value.lower() if value else value


def without_nul(value: Any, info: ValidationInfo) -> Any:
    """A stored text member (or list of them) that holds no U+0000: PostgreSQL's text
    cannot, and a stored text must read back as it was given on every engine."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        raise ValueError(
            f"{info.field_name} contains a NUL character (U+0000), which is not allowed"
        )
    return value


class UploadFileSpec(RequestModel):
    """One file of an upload."""

    name: str = Field(description="Relative POSIX path, 1–1,024 bytes")
    size: int = Field(ge=0, le=MAX_FILE_SIZE, description="Size in bytes")
    role: Role
    content_type: str | None = Field(default=None, max_length=255)
    sha256: str | None = Field(
        default=None, description="Hex SHA-256 of the file; completion verifies it"
    )

    @field_validator("name")
    @classmethod
    def _name_is_relative_path(cls, value: str) -> str:
        problem = file_name_problem(value)
        if problem:
            raise ValueError(f"File name {value!r} {problem}")
        return value

    _sha256_is_hex = field_validator("sha256")(sha256_hex)


class TracesetUploadUrlRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/upload-url``."""

    name: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=4096)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=64
    )
    workspace_id: str | None = None
    ttl_days: int | None = Field(default=None, ge=1, le=365)
    # At least one file, checked by the validator to word it as the reference does.
    files: list[UploadFileSpec] = Field(json_schema_extra={"minItems": 1})
    workload_metadata: MetadataField = None

    _texts_without_nul = field_validator("name", "description", "tags")(without_nul)

    @field_validator("files")
    @classmethod
    def _unique_names(cls, files: list[UploadFileSpec]) -> list[UploadFileSpec]:
        if not files:
            raise ValueError("At least one file is required")
        seen: set[str] = set()
        for spec in files:
            if spec.name in seen:
                raise ValueError(f"File name {spec.name!r} appears more than once")
            seen.add(spec.name)
        collision = name_collision(seen)
        if collision:
            raise ValueError(collision)
        return files


class PartUploadUrl(WireModel):
    part_number: int
    size: int
    url: str


class ReceivedPart(WireModel):
    part_number: int
    size: int
    etag: str


class FileUploadUrls(WireModel):
    name: str
    size: int
    part_urls_expire_at: Timestamp
    parts: list[PartUploadUrl] = Field(
        description="Parts still to send, each with its URL: the first few of them (a page; "
        "the resume route answers the next), or none once the session is completed"
    )
    received_parts: list[ReceivedPart] = Field(
        default_factory=list, description="Parts the store already holds (resume)"
    )


class UploadUrlResponse(WireModel):
    upload_id: str
    traceset_id: str
    checksum_algorithm: Literal["SHA256"] = "SHA256"
    expires_at: Timestamp
    part_size: int
    files: list[FileUploadUrls]


class UploadSessionResponse(UploadUrlResponse):
    """The resume view of an upload session."""

    state: str


class CompletedPart(RequestModel):
    part_number: int = Field(ge=1)
    etag: str = Field(min_length=1)


class CompletedFileInput(RequestModel):
    name: str
    parts: list[CompletedPart]
    sha256: str | None = Field(
        default=None,
        description="Hex SHA-256 of the file, when the client hashed it while sending; "
        "completion verifies it",
    )

    _sha256_is_hex = field_validator("sha256")(sha256_hex)


class CompleteRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/upload-url/complete``."""

    upload_id: str
    files: list[CompletedFileInput]


# --- tracesets ---


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
    workload_metadata: MetadataField = None
    files: list[FileResponse]
    inspection: dict[str, Any] | None = None


class ErrorDetail(WireModel):
    code: str
    message: str
    request_id: str


class ErrorEnvelope(WireModel):
    error: ErrorDetail


class Health(WireModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


# --- answers of the listing, promotion and bytes routes (SPEC 5.6, 5.7, 6) ---


class SnakeWireModel(BaseModel):
    """A wire model whose JSON members are snake_case (the resolve answer, SPEC 5.7)."""

    model_config = ConfigDict(populate_by_name=True, defer_build=True)


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
    workload: WorkloadSummary = Field(default_factory=WorkloadSummary)


class Pagination(WireModel):
    count: int
    has_more: bool
    next_cursor: str | None = None


class TracesetPage(WireModel):
    """Body of ``GET /api/v1/tracesets``: one page of tracesets."""

    items: list[TracesetListItem]
    pagination: Pagination


class DownloadAnswer(WireModel):
    """Body of ``GET /api/v1/tracesets/{id}/download``: a presigned GET URL."""

    url: str
    expires_at: Timestamp
    file: str | None = Field(default=None, description="The file's name; null for the ZIP")
    ranks: str | None = Field(
        default=None, description="The ranks of a ranks download (0-7,12); null otherwise"
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


class ValidateAnswer(WireModel):
    """Body of ``POST /api/v1/tracesets/{id}/validate``."""

    valid: bool
    checks: list[ValidationCheck]


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

    target: str = Field(
        default="tenant",
        description="The scope to promote to, one step up: `tenant` (the default) from "
        "`workspace`, `public` from `tenant` (needs a tenant admin)",
    )
    workload_metadata: MetadataField = Field(
        default=None,
        description="Replaces the stored workloadMetadata (stored exactly as given) when the "
        "promotion succeeds; checked by promotion's typed model and rank-count guard",
    )
    description: str | None = Field(
        default=None, max_length=4096, description="Replaces the description on success"
    )
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=64, description="Replace the tags on success"
    )

    _texts_without_nul = field_validator("description", "tags")(without_nul)


class PromoteAnswer(WireModel):
    """Body of a promotion's answer."""

    id: str
    scope: Scope
    promotion_applied: bool


# --- libraries: the content-addressed content tracesets share (snake_case, as the reference) ---


class LibraryItem(SnakeWireModel):
    """A library as listed: the blobs of one traceset content, shared by the tracesets with
    that content. ``scope`` is the widest scope, and ``reference_count`` the number, of the
    live tracesets the caller may see that hold it."""

    id: str
    hash_short: str
    storage_url: str = Field(description="The store's root; each blob's key is as resolve says")
    layout: Literal["cas"] = "cas"
    scope: Scope
    total_size: int
    reference_count: int
    created: Timestamp = Field(description="When the first of those tracesets was completed")


class LibraryPage(WireModel):
    """Body of ``GET /api/v1/libraries``: one page of libraries."""

    items: list[LibraryItem]
    pagination: Pagination


class LibraryTraceset(SnakeWireModel):
    id: str
    name: str
    workspace_id: str


class LibraryFile(SnakeWireModel):
    name: str
    size: int
    hash: str


class Library(LibraryItem):
    """Body of ``GET /api/v1/libraries/{id}``: the library with its files and the tracesets
    the caller may see that hold it."""

    hash: str
    files: list[LibraryFile]
    tracesets: list[LibraryTraceset]


# --- what the admin commands print with --json (tracestore token|workspace) ---


class NewApiToken(WireModel):
    """An API token just issued; ``token`` is its secret, shown this once."""

    id: str
    token: str
    user_id: str
    name: str
    expires_at: Timestamp | None


class ApiToken(WireModel):
    """An API token as listed: never its secret."""

    id: str
    name: str
    user_id: str
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None


class Workspace(WireModel):
    id: str
    name: str
    tenant_id: str


class Tenant(WireModel):
    """A tenant: a group of users and workspaces that see each other's tenant-scope data."""

    id: str
    name: str
    created_at: Timestamp
    workspaces: list[Workspace]


class User(WireModel):
    """A user as the admin commands show it (``workspaces`` are names in its tenant)."""

    id: str
    name: str
    tenant_id: str
    tenant_name: str
    workspaces: list[str]
    is_tenant_admin: bool
    created_at: Timestamp
    disabled_at: Timestamp | None
