"""The upload's wire models: the upload-url request and its files, the part URLs answered for
them (at start and on resume), the completion request, and the census of files before they
are sent."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from tracestore.choices import CensusVerdict
from tracestore.schemas.filenames import (
    MAX_NAME_BYTES,
    NAME_PATTERN,
    file_name_problem,
    name_collision,
)
from tracestore.schemas.wire import (
    NUL_FREE,
    SHA256_HEX,
    Integer,
    RequestModel,
    Role,
    Text,
    Timestamp,
    WireModel,
    integral,
    without_nul,
)
from tracestore.schemas.workload import MetadataField

MAX_FILE_SIZE = 5 * 1024**4  # 5 TiB, as S3


def sha256_hex(value: str | None) -> str | None:
    """A declared SHA-256: 64 hexadecimal characters, kept in lower case."""
    if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise ValueError(f"sha256 must be 64 hexadecimal characters, got {value!r}")
    return value.lower() if value else value


def relative_file_name(value: str) -> str:
    """A file's name in an upload: file_name_problem's words when it breaks the rules."""
    problem = file_name_problem(value)
    if problem:
        raise ValueError(f"File name {value!r} {problem}")
    return value


class UploadFileSpec(RequestModel):
    """One file of an upload."""

    # The pattern and length are the description's (file_name_problem words what breaks them).
    name: Text = Field(
        description="Relative POSIX path, 1–1,024 bytes",
        json_schema_extra={"pattern": NAME_PATTERN, "maxLength": MAX_NAME_BYTES},
    )
    size: Integer = Field(ge=0, le=MAX_FILE_SIZE, description="Size in bytes")
    role: Role
    content_type: Text | None = Field(default=None, max_length=255)
    sha256: Text | None = Field(
        default=None,
        description="Hex SHA-256 of the file; completion verifies it",
        json_schema_extra=SHA256_HEX,
    )

    _name_is_relative_path = field_validator("name")(relative_file_name)

    _sha256_is_hex = field_validator("sha256")(sha256_hex)


class TracesetUploadUrlRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/upload-url``."""

    # The members PATCH takes too (schemas.EditRequest), with the same constraints; kept as
    # they were written here, so the description (and schema fuzzing's data) stays as it was.
    name: Text = Field(min_length=1, max_length=255, json_schema_extra=NUL_FREE)
    description: Text | None = Field(default=None, max_length=4096, json_schema_extra=NUL_FREE)
    tags: list[Annotated[Text, Field(min_length=1, max_length=64, json_schema_extra=NUL_FREE)]] = (
        Field(default_factory=list, max_length=64)
    )
    workspace_id: Text | None = None
    # Bounds before the validator: inside the union, pydantic would describe them as ge/le.
    ttl_days: Annotated[int, Field(ge=1, le=365), BeforeValidator(integral)] | None = None
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


UPLOAD_WARNINGS = (
    "What the accepted workloadMetadata holds that will not work as meant, in words: a member "
    "spelled near one the rules read (did you mean ...?), or one that upload stores as given "
    "but promotion will refuse (a shape.global_batch_size given as a string). Upload does not "
    "refuse them (upload checks only the rank count)"
)


class UploadUrlResponse(WireModel):
    upload_id: str
    traceset_id: str
    checksum_algorithm: Literal["SHA256"] = "SHA256"
    expires_at: Timestamp = Field(description="When the upload session expires")
    part_size: int
    files: list[FileUploadUrls]
    warnings: list[str] = Field(
        default_factory=list,
        description=UPLOAD_WARNINGS + "; upload-url's alone (the resume view answers none)",
    )
    traceset_expires_at: Timestamp | None = Field(
        default=None,
        description="When the traceset expires unless used: ttlDays after its last use (a "
        "download or resolve is a use); promotion keeps it (null: it never expires). An "
        "extension",
    )
    ttl_days: int | None = Field(
        default=None, description="The traceset's days unused before it expires; an extension"
    )


class UploadCheckAnswer(WireModel):
    """Answer of ``POST /api/v1/tracesets/upload-url/check``: upload-url would accept the
    body (its refusals are the same errors upload-url answers)."""

    valid: Literal[True] = True
    rank_count: int | None = Field(
        description="The rank count the workloadMetadata declares (rankCountDerived), or null"
    )
    warnings: list[str] = Field(default_factory=list, description=UPLOAD_WARNINGS)


class UploadSessionResponse(UploadUrlResponse):
    """The resume view of an upload session."""

    state: str


class CompletedPart(RequestModel):
    part_number: Integer = Field(ge=1)
    etag: Text = Field(min_length=1)


class CompletedFileInput(RequestModel):
    name: Text
    parts: list[CompletedPart]
    sha256: Text | None = Field(
        default=None,
        description="Hex SHA-256 of the file, when the client hashed it while sending; "
        "completion verifies it",
        json_schema_extra=SHA256_HEX,
    )

    _sha256_is_hex = field_validator("sha256")(sha256_hex)


class CompleteRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/upload-url/complete``."""

    upload_id: Text
    files: list[CompletedFileInput]


# The most of a file's first bytes the census before upload reads (a Kineto trace's
# distributedInfo and an execution trace's first record_param_comms rows come well before).
CENSUS_HEAD_BYTES = 1024 * 1024
_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class CensusFile(RequestModel):
    """A primary file about to be uploaded, known by its first bytes."""

    name: Text = Field(
        description="Its name in the upload: a relative POSIX path, 1–1,024 bytes",
        json_schema_extra={"pattern": NAME_PATTERN, "maxLength": MAX_NAME_BYTES},
    )
    size: Integer = Field(ge=0, le=MAX_FILE_SIZE, description="Its whole size in bytes")
    head: Text = Field(
        description="Its first bytes, base64 (all of it when it is no larger than "
        f"{CENSUS_HEAD_BYTES:,} bytes; at most that many)",
        json_schema_extra={"pattern": _BASE64, "maxLength": (CENSUS_HEAD_BYTES + 2) // 3 * 4},
    )

    _name_is_relative_path = field_validator("name")(relative_file_name)

    @model_validator(mode="after")
    def _head_is_base64(self) -> CensusFile:
        try:
            held = len(base64.b64decode(self.head, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError(f"head of {self.name!r} must be base64 (RFC 4648, padded)") from None
        if held > CENSUS_HEAD_BYTES:
            raise ValueError(
                f"head of {self.name!r} holds {held} bytes; send at most its first "
                f"{CENSUS_HEAD_BYTES}"
            )
        return self

    def head_bytes(self) -> bytes:
        """The bytes ``head`` holds."""
        return base64.b64decode(self.head)


class UploadCensusRequest(RequestModel):
    """Body of ``POST /api/v1/tracesets/upload-url/census``: the primary files of an upload
    about to start, each by its first bytes, and its workloadMetadata."""

    files: list[CensusFile] = Field(min_length=1)
    workload_metadata: MetadataField = None


class UploadCensusAnswer(WireModel):
    """The rank census of files not sent yet, as ``tracestore upload`` takes it locally."""

    census: CensusVerdict = Field(
        description="fail: the files miss ranks, hold some twice, or disagree with the "
        "declared degrees; pass; unknown: a file's rank is not in the bytes sent of it"
    )
    missing_ranks: int | None = Field(description="Expected ranks no file holds (null: unknown)")
    expected_rank_count: int | None
    ranks_found: list[int]
    problems: list[str] = Field(description="What fails, in the census's words")
    unread: list[str] = Field(
        description="Files whose first bytes did not tell their rank: the service reads them "
        "whole once uploaded"
    )
