"""Records: the SQLAlchemy 2 tables. The same tables serve SQLite (embedded default, WAL
mode) and PostgreSQL; schema changes go through the Alembic migrations in ``migrations/``.
The engine, sessions and migrating are ``database.py``'s."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tracestore.schemas import format_timestamp


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        """On SQLite, SQLAlchemy's reading of the stored text (``fromisoformat``) and
        ``process_result_value`` in one call: the list page reads two timestamps a row,
        and three calls a value were a tenth of its CPU."""
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def process(value: str | None) -> datetime | None:
            return None if value is None else _from_sqlite_text(value)

        return process


def _from_sqlite_text(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def stored_timestamp(column: Any, dialect: str) -> Any:
    """``column`` (a timestamp) as a select should read it for the API's answer: on SQLite
    its stored text, which ``timestamp_text`` slices; elsewhere the column itself."""
    if dialect != "sqlite":
        return column
    return type_coerce(column, Text).label(column.key)


def sqlite_timestamp_text(value: datetime) -> str:
    """The text ``UTCDateTime`` stores on SQLite for the instant ``value`` (SQLAlchemy's
    ``YYYY-MM-DD HH:MM:SS.ffffff`` of its UTC time), for a select that compares stored text
    (the list's cursor)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def timestamp_value(value: datetime | str) -> datetime:
    """A timestamp column's value, read as ``UTCDateTime`` reads it or as SQLite's stored
    text (a select that coerced the column to Text, as the list page does)."""
    return _from_sqlite_text(value) if isinstance(value, str) else value


def timestamp_text(value: datetime | str) -> str:
    """``schemas.format_timestamp`` of a timestamp column's value, read either way (see
    ``timestamp_value``). SQLite's stored text is UTC, ``YYYY-MM-DD HH:MM:SS.ffffff`` as
    SQLAlchemy writes what ``UTCDateTime`` binds, and is sliced to the answer's text: parsing
    and formatting cost 1.9 us a value, a tenth of a list page. Text of any other shape is
    parsed."""
    if (
        isinstance(value, str)
        and len(value) == 26
        and value[10] == " "
        and value[19] == "."
        and value[20:].isascii()
        and value[20:].isdigit()  # six digits of microseconds, no zone after a shorter fraction
    ):
        return f"{value[:10]}T{value[11:23]}Z"
    return format_timestamp(timestamp_value(value))


# JSON documents: JSONB on PostgreSQL (indexable), JSON text on SQLite.
JSONDoc = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Workspace(Base):
    __tablename__ = "workspaces"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_workspaces_tenant_name"),)


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    external_subject: Mapped[str | None] = mapped_column(String(255), unique=True)
    is_tenant_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    default_workspace_id: Mapped[str | None] = mapped_column(ForeignKey("workspaces.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class Membership(Base):
    __tablename__ = "memberships"
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


# The member the list's SQLite indexes cover, spelled as listing_sql's filter spells it (an
# expression index serves only the same expression), and those indexes with their arm's prefix.
SQLITE_FAMILY = "json_extract(workload_metadata, '$.workload_family')"
FAMILY_INDEXES = (
    ("ix_tracesets_workspace_family_created", ("workspace_id",)),
    ("ix_tracesets_scope_tenant_family_created", ("scope", "tenant_id")),
    ("ix_tracesets_scope_family_created", ("scope",)),
)
# The list's step_time sort (migration 0009): per arm, the analysed tracesets in (median step
# time, created, id) order; partial, so a traceset costs them nothing until it is analysed.
STEP_TIME_INDEXES = (
    ("ix_tracesets_workspace_step_time", ("workspace_id",)),
    ("ix_tracesets_scope_tenant_step_time", ("scope", "tenant_id")),
    ("ix_tracesets_scope_step_time", ("scope",)),
)
STEP_TIME_ANALYSED = "median_step_time_us IS NOT NULL"
CREATOR_INDEXES = (
    ("ix_tracesets_creator_workspace_created", ("created_by", "workspace_id", "created_at", "id")),
    ("ix_tracesets_creator_scope_created", ("created_by", "scope", "created_at", "id")),
)


class Traceset(Base):
    __tablename__ = "tracesets"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"))
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(32))
    scope: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ttl_days: Mapped[int] = mapped_column(Integer)
    rank_count: Mapped[int | None] = mapped_column(BigInteger)
    total_size: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str | None] = mapped_column(String(80))
    # The metadata exactly as given (key order, numbers as written) ...
    metadata_text: Mapped[str | None] = mapped_column(Text)
    # ... and the same document as queryable JSON for the list filters.
    workload_metadata: Mapped[Any] = mapped_column(JSONDoc, nullable=True)
    # Read only where it is used (deferred): a stored inspection can be megabytes of JSON.
    inspection: Mapped[Any] = mapped_column(JSON, nullable=True, deferred=True)
    # The world size inspection found (inspection.summary.worldSize), for the list's ranges.
    inspected_world_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The analysis summary's medians over ranks, for the list's filters and sort (0009).
    median_idle_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    median_overlap_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    median_step_time_us: Mapped[float | None] = mapped_column(Double, nullable=True)
    # The last edit of its name, description or tags (PATCH), and by whom (0010).
    edited_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # A user's id; no foreign key: SQLite's DROP COLUMN (the downgrade) refuses one.
    edited_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    __table_args__ = (
        Index("ix_tracesets_workspace_created", "workspace_id", "created_at", "id"),
        # The uploadedBy filter (migration 0010): an uploader's tracesets per arm, in
        # created order (the tenant and public arms share the scope one: a user's tenant is one).
        *(Index(name, *columns) for name, columns in CREATOR_INDEXES),
        # Inspection facts (migration 0004): minWorldSize / maxWorldSize / inspected.world_size.
        Index("ix_tracesets_inspected_world_size", "inspected_world_size", "id"),
        # Analysis (migration 0009): minIdlePct / maxIdlePct, minOverlapPct, sort=step_time.
        Index("ix_tracesets_median_idle_pct", "median_idle_pct", "id"),
        Index("ix_tracesets_median_overlap_pct", "median_overlap_pct", "id"),
        *(
            Index(
                name,
                *prefix,
                "median_step_time_us",
                "created_at",
                "id",
                sqlite_where=text(STEP_TIME_ANALYSED),
                postgresql_where=text(STEP_TIME_ANALYSED),
            )
            for name, prefix in STEP_TIME_INDEXES
        ),
        Index("ix_tracesets_tenant_scope", "tenant_id", "scope"),
        Index("ix_tracesets_status_expires", "status", "expires_at"),
        # Listing (migration 0002): one ordered index per visibility branch ...
        Index("ix_tracesets_scope_created", "scope", "created_at", "id"),
        Index("ix_tracesets_scope_tenant_created", "scope", "tenant_id", "created_at", "id"),
        Index("ix_tracesets_workspace_name", "workspace_id", "name", "id"),
        Index("ix_tracesets_scope_name", "scope", "name", "id"),
        Index("ix_tracesets_scope_tenant_name", "scope", "tenant_id", "name", "id"),
        Index("ix_tracesets_workspace_total_size", "workspace_id", "total_size", "id"),
        Index("ix_tracesets_scope_total_size", "scope", "total_size", "id"),
        Index("ix_tracesets_scope_tenant_total_size", "scope", "tenant_id", "total_size", "id"),
        # ... on SQLite, the workload_family filter per arm in created order (migration 0007):
        # without, a page parses the metadata of every row it walks past ...
        *(
            Index(name, *prefix, text(SQLITE_FAMILY), "created_at", "id").ddl_if(dialect="sqlite")
            for name, prefix in FAMILY_INDEXES
        ),
        # ... and, on PostgreSQL, the workload filters' @> and the name search.
        Index(
            "ix_tracesets_metadata_gin",
            "workload_metadata",
            postgresql_using="gin",
            postgresql_ops={"workload_metadata": "jsonb_path_ops"},
        ).ddl_if(dialect="postgresql"),
        Index(
            "ix_tracesets_name_trgm",
            "name",
            postgresql_using="gin",
            postgresql_ops={"name": "gin_trgm_ops"},
        ).ddl_if(dialect="postgresql"),
    )


class TracesetFile(Base):
    __tablename__ = "traceset_files"
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(1024))
    size: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(String(16))
    content_type: Mapped[str | None] = mapped_column(String(255))
    expected_sha256: Mapped[str | None] = mapped_column(String(64))
    sha256: Mapped[str | None] = mapped_column(ForeignKey("blobs.sha256"), index=True)
    staging_handle: Mapped[str | None] = mapped_column(String(1024))
    metadata_status: Mapped[str] = mapped_column(String(16))
    metadata_reason: Mapped[str | None] = mapped_column(Text)
    inspection: Mapped[Any] = mapped_column(JSON, nullable=True, deferred=True)
    rank_start: Mapped[int | None] = mapped_column(BigInteger)
    rank_end: Mapped[int | None] = mapped_column(BigInteger)
    # Where inspection found the file's ranks (the census's rankProvenance), which the GET
    # answers without reading the traceset's inspection (migration 0008).
    rank_provenance: Mapped[str | None] = mapped_column(Text, nullable=True)
    __table_args__ = (UniqueConstraint("traceset_id", "name", name="uq_traceset_files_name"),)


class TracesetFact(Base):
    """One searchable fact inspection derived for a traceset (``gpu_model`` = ``h100``):
    the ``inspected.<fact>=value`` list filters are an indexed lookup of (fact, value)."""

    __tablename__ = "traceset_facts"
    fact: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(String(255), primary_key=True)
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), primary_key=True)
    __table_args__ = (Index("ix_traceset_facts_traceset", "traceset_id"),)


class TracesetTag(Base):
    """One tag of a traceset (its ``tags`` hold the same, in the order given): the list's
    ``tag`` filters are an indexed lookup of (tag, traceset) per row walked (0010)."""

    __tablename__ = "traceset_tags"
    tag: Mapped[str] = mapped_column(String(64), primary_key=True)
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), primary_key=True)
    __table_args__ = (Index("ix_traceset_tags_traceset", "traceset_id"),)


class TracesetAnalysis(Base):
    """A traceset's analysis (``server/analysis.py``): its state while the per-file jobs run
    (``remaining`` of them not ended), and once assembled its summary as the API answers it
    (JSON text, written once)."""

    __tablename__ = "traceset_analyses"
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # pending, complete, failed, none
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    files: Mapped[int] = mapped_column(Integer)  # per-file jobs queued
    remaining: Mapped[int] = mapped_column(Integer)  # ... and not ended yet
    # Whether those jobs also inspect their files (the assembling job then takes the census).
    inspects: Mapped[bool] = mapped_column(Boolean)
    analyzed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    summary_text: Mapped[str | None] = mapped_column(Text, nullable=True, deferred=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FileAnalysis(Base):
    """One analysed Kineto file of a traceset: its rank's analysis as the API answers it
    (``analysis_text``: the members after ``rank``, ``file`` and ``status``, JSON text written
    once), the figures the summary takes, and what issue 45 needs (``detail``)."""

    __tablename__ = "file_analyses"
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    file: Mapped[str] = mapped_column(String(1024))
    rank: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # complete, failed
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    analysis_text: Mapped[str | None] = mapped_column(Text, nullable=True, deferred=True)
    compute_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    non_compute_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    idle_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    overlap_pct: Mapped[float | None] = mapped_column(Double, nullable=True)
    step_time_us: Mapped[float | None] = mapped_column(Double, nullable=True)
    # Per (step, kernel) totals and the collectives in start order: zlib-compressed JSON.
    detail: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    analyzed_by: Mapped[str] = mapped_column(String(128))  # the worker that ran the job
    analyzed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    __table_args__ = (Index("ix_file_analyses_traceset_rank", "traceset_id", "rank"),)


class UploadSession(Base):
    __tablename__ = "upload_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    traceset_id: Mapped[str] = mapped_column(ForeignKey("tracesets.id"), unique=True)
    state: Mapped[str] = mapped_column(String(16))
    part_size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    __table_args__ = (Index("ix_upload_sessions_state_expires", "state", "expires_at"),)


class Blob(Base):
    __tablename__ = "blobs"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Set when the last live file referencing the blob went away; purged after the grace.
    unreferenced_since: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)


class SigningKey(Base):
    """A key of the presigned URLs, shared by every process: the newest signs, and its
    predecessors still verify for a URL lifetime after they were replaced."""

    __tablename__ = "signing_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Job(Base):
    """A unit of background work (``inspect`` a traceset, ``sweep``), claimed by a worker
    under a lease (``server/jobs.py``)."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    subject: Mapped[str | None] = mapped_column(String(255))
    # Set while the job is live (queued or running), cleared when it ends: one live job
    # per key, and a finished one does not stop the next.
    dedupe_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Attempts whose worker died mid-run (its lease lapsed): past TRACESTORE_JOB_CRASHES the
    # job is given up (migration 0008).
    crashes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The worker whose attempt ended the job (its lease owner then), kept after the end (0009).
    ran_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    run_after: Mapped[datetime] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    __table_args__ = (Index("ix_jobs_state_run_after", "state", "run_after"),)
