"""Settings: one object, built once at start from ``TRACESTORE_*`` and passed in.

Every value has a zero-configuration default: a SQLite file and a blob directory inside
``./tracestore-data``. A TOML file named by ``TRACESTORE_CONFIG`` may supply values (keys as
the field names, ``part_size``, or as the variables, ``TRACESTORE_PART_SIZE``); the
environment wins over the file, and keyword arguments win over both. Durations are seconds
(``60``) or ISO 8601 (``PT1M``), sizes bytes (``67108864``) or with a unit (``64MiB``,
``64MB``). ``Settings.load`` refuses a bad value with one ``SettingsError`` line per
setting and keeps a warning for every unknown ``TRACESTORE_*`` variable or TOML key.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    IPvAnyNetwork,
    PrivateAttr,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tracestore.analysis.rank import Limits as AnalysisLimits
from tracestore.inspect.streams import MAX_EXPANSION, MAX_MEMBERS, MAX_UNPACKED, Limits

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB
MAX_PARTS_PER_FILE = 10_000

PREFIX = "TRACESTORE_"
# TRACESTORE_* variables that are not service settings: the client's, the config file's
# own, and the test suite's switches.
OTHER_VARIABLES = frozenset({"TRACESTORE_URL", "TRACESTORE_TOKEN", "TRACESTORE_CONFIG"})
OTHER_PREFIXES = ("TRACESTORE_TEST_",)

SIZE_FORM = "bytes (67108864) or a size with a unit (64MiB, 64MB, 1GiB)"
DURATION_FORM = "seconds (60) or ISO 8601 (PT1M, P1D)"
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)
_SECONDS = re.compile(r"\s*\d+(?:\.\d+)?\s*")
_TIMEDELTA: TypeAdapter[timedelta] = TypeAdapter(timedelta)


class SettingsError(ValueError):
    """Settings that cannot be used; the message names each setting, its value and the
    form expected, one line each."""


def parse_size(value: object) -> object:
    """Bytes from ``67108864``, ``64MiB`` (binary) or ``64MB`` (decimal); others unchanged
    for the field's own check."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {SIZE_FORM}")
    if not isinstance(value, str):
        return value
    match = _SIZE.fullmatch(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"expected {SIZE_FORM}")
    size = float(match.group(1)) * _UNITS[unit]
    if size != int(size):
        raise ValueError(f"expected a whole number of bytes: {SIZE_FORM}")
    return int(size)


def parse_duration(value: object) -> timedelta:
    """A positive duration from seconds (a number, or its text) or ISO 8601 text."""
    duration = _duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"expected a positive duration: {DURATION_FORM}")
    return duration


def parse_duration_or_zero(value: object) -> timedelta:
    """A duration of zero or more, written as ``parse_duration`` reads it: for the settings
    where 0 means "now" (no grace, no window)."""
    duration = _duration(value)
    if duration < timedelta(0):
        raise ValueError(f"expected zero or a positive duration: {DURATION_FORM}")
    return duration


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str) and _SECONDS.fullmatch(value):
        return timedelta(seconds=float(value))
    if isinstance(value, str) and value.strip().upper().startswith("P"):
        try:
            return _TIMEDELTA.validate_python(value.strip().upper())
        except PydanticValidationError:
            raise ValueError(f"expected {DURATION_FORM}") from None
    raise ValueError(f"expected {DURATION_FORM}")


Size = Annotated[int, BeforeValidator(parse_size)]
# Durations are positive (a lease, a URL's life, an interval: 0 would make them useless or a
# busy loop) except the graces and windows where 0 means "now" (README's settings table).
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
ZeroOrDuration = Annotated[timedelta, BeforeValidator(parse_duration_or_zero)]


class Settings(BaseSettings):
    """Everything the service reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="TRACESTORE_", extra="ignore")

    data_dir: Path = Path("./tracestore-data")
    database_url: str | None = None
    blob_url: str | None = None
    s3_endpoint_url: str | None = None
    public_url: str | None = None
    # Peers whose X-Forwarded-Proto/-Host are believed (a reverse proxy in front).
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8000

    part_size: Size = Field(default=64 * MIB, ge=MIN_PART_SIZE)
    max_files_per_upload: int = Field(default=10_000, ge=1)
    max_json_body: Size = Field(default=16 * MIB, ge=1024)
    default_ttl_days: int = Field(default=7, ge=1, le=365)
    session_ttl: Duration = timedelta(hours=24)
    part_url_ttl: Duration = timedelta(hours=1)
    download_url_ttl: Duration = timedelta(minutes=15)
    purge_grace: ZeroOrDuration = timedelta(hours=24)
    completion_lease: Duration = timedelta(seconds=60)
    sweep_interval: Duration = timedelta(minutes=5)
    # Background jobs: a worker renews its lease every third of it; a job whose worker
    # stopped renewing is taken over once it lapses, and given up after this many tries.
    job_lease: Duration = timedelta(seconds=60)
    job_attempts: int = Field(default=3, ge=1, le=100)
    # A job whose worker died while running it (its lease lapsed) this many times is failed
    # with that reason, not handed to the next worker to die again.
    job_crashes: int = Field(default=2, ge=1, le=100)
    # What inspecting one stored file may cost (inspect.Limits): decompressed bytes in all,
    # at most this many times its stored size (plus 1 MiB), members inspected per archive;
    # and the inspection stored per traceset (inspection.bounded).
    inspect_max_unpacked: Size = Field(default=MAX_UNPACKED, ge=1)
    inspect_max_expansion: int = Field(default=MAX_EXPANSION, ge=1)
    inspect_max_members: int = Field(default=MAX_MEMBERS, ge=1)
    max_inspection_size: Size = Field(default=16 * MIB, ge=64 * 1024)
    # What analysing one Kineto trace may hold in memory (analysis.Limits.sort_memory: its
    # records being sorted; past it they spill to disk), and the analysis stored per
    # traceset, shared out among its files (analysis.file_share).
    analysis_memory: Size = Field(default=64 * MIB, ge=4 * MIB)
    max_analysis_size: Size = Field(default=64 * MIB, ge=64 * 1024)
    # Communication kernels kept per rank for straggler matching (the first ones by start;
    # analysis.Limits.collectives): what the assembly holds grows with it, not with a trace.
    straggler_collectives: int = Field(default=10_000, ge=1, le=1_000_000)
    # Whether this process runs a worker (serve's --no-worker: an API-only replica).
    in_process_worker: bool = True
    # How long a stopping ``serve`` lets open requests finish before it cancels them: a
    # client that stops reading (or sending) must not hold a restart up forever. Below an
    # orchestrator's kill deadline (Kubernetes: 30 s).
    shutdown_grace: ZeroOrDuration = timedelta(seconds=20)

    # How long a blob validate re-hashed whole is believed intact (per process; 0: re-hash
    # it at every validate). Validates of one blob at once share one read either way.
    reverify_interval: ZeroOrDuration = timedelta(hours=1)

    # Connections: one waiting for a request (new, or idle after an answer) is closed after
    # idle_timeout (longer than a load balancer's common 60 s, which reuses it); a request's
    # headers must be whole header_timeout after their first byte; one whose peer takes
    # none of its answer for send_timeout is closed; at most max_connections per serving
    # process (None: what its open-file limit allows, connections.py).
    idle_timeout: Duration = timedelta(seconds=75)
    header_timeout: Duration = timedelta(seconds=20)
    send_timeout: Duration = timedelta(seconds=120)
    max_connections: int | None = Field(default=None, ge=1)

    signing_key: str | None = None
    # How long a checked API token is believed without a lookup (auth.TokenCache); 0: never.
    token_cache_seconds: float = Field(default=2.0, ge=0, le=300)

    jwks_url: str | None = None
    jwks_file: Path | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["RS256", "ES256"]
    )
    jwt_user_claim: str = "sub"
    jwt_tenant_claim: str = "tenant"
    jwt_workspaces_claim: str = "workspaces"
    jwt_admin_claim: str = "tenant_admin"

    # The web page's sign-in through the deployment's OpenID Connect login (authorization
    # code with PKCE, the page a public client); the tokens it gets are the JWTs above.
    oidc_authorization_url: str | None = None
    oidc_token_url: str | None = None
    oidc_scope: str = "openid"
    oidc_client_id: str | None = Field(default=None, validate_default=True)
    # Origins besides its own the page may send requests to. None: the blob store's part
    # URLs' origin (an S3 bucket's; web.connect_origins), so browser uploads to S3 just work.
    web_connect_origins: Annotated[list[str] | None, NoDecode] = None

    # What one upload may ask of the service: bytes declared in all, part URLs per answer.
    max_upload_size: int = Field(default=5 * 1024**4, ge=1)
    part_urls_per_answer: int = Field(default=10_000, ge=1)
    # Distinct values an inspection's summary keeps per member (GPU models, backends, NCCL
    # versions), and values per fact a traceset is searchable by (summary.MAX_DISTINCT_VALUES).
    inspection_distinct_values: int = Field(default=32, ge=1, le=1000)

    @field_validator("jwt_algorithms")
    @classmethod
    def _only_asymmetric(cls, value: list[str]) -> list[str]:
        allowed = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}
        bad = [alg for alg in value if alg not in allowed]
        if bad:
            raise ValueError(f"unsupported JWT algorithms {bad}; allowed: {sorted(allowed)}")
        return value

    @field_validator("trusted_proxies", "jwt_algorithms", "web_connect_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        # A list from the environment: comma-separated, or a JSON array.
        if isinstance(value, str) and value.strip().startswith("["):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("expected a JSON array or comma-separated values") from None
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("public_url")
    @classmethod
    def _absolute_http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("oidc_authorization_url", "oidc_token_url")
    @classmethod
    def _login_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^/?#\s]+(/[^#\s]*)?", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("oidc_client_id")
    @classmethod
    def _login_complete(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Declared after the JWT settings and the login URLs, so they are in info.data.
        urls = [info.data.get("oidc_authorization_url"), info.data.get("oidc_token_url")]
        if value is None:
            if any(urls):
                raise ValueError(
                    "the page's OIDC login needs its client id too (TRACESTORE_OIDC_CLIENT_ID)"
                )
            return None
        if not all(urls):
            raise ValueError(
                "the page's OIDC login needs TRACESTORE_OIDC_AUTHORIZATION_URL and "
                "TRACESTORE_OIDC_TOKEN_URL"
            )
        if not (info.data.get("jwks_url") or info.data.get("jwks_file")):
            raise ValueError(
                "the page's OIDC login gives JWTs the service must verify: set "
                "TRACESTORE_JWKS_URL or TRACESTORE_JWKS_FILE (and the issuer and audience)"
            )
        return value

    @field_validator("web_connect_origins")
    @classmethod
    def _origins(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        bad = [o for o in value if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", o)]
        if bad:
            raise ValueError(
                f"expected origins such as https://s3.example.com:9000 (scheme, host, port; "
                f"no path), got {bad}"
            )
        return [origin.rstrip("/") for origin in value]

    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """What ``load`` found but did not use (unknown names), for the caller to show."""
        return self._warnings

    @classmethod
    def load(cls, **overrides: Any) -> Settings:
        """Build settings from the optional TOML file, the environment and ``overrides``.
        Raises SettingsError (one line per bad setting); unknown names become warnings."""
        config = os.environ.get("TRACESTORE_CONFIG")
        file_values, warnings = _read_config(config, cls.model_fields) if config else ({}, [])
        warnings += unknown_variables(os.environ, cls.model_fields)
        env_names = {name for name in cls.model_fields if _variable(name) in os.environ}
        values = {k: v for k, v in file_values.items() if k not in env_names}
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            settings = cls(**values)
        except PydanticValidationError as exc:
            raise SettingsError(_problems(exc, file_values, env_names, config)) from None
        settings._warnings = warnings
        return settings

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'tracestore.db').resolve()}"

    @property
    def resolved_blob_url(self) -> str:
        if self.blob_url:
            return self.blob_url
        return (self.data_dir / "blobs").resolve().as_uri()

    @property
    def inspect_limits(self) -> Limits:
        """What inspecting one stored file may cost, from the ``inspect_*`` settings."""
        return Limits(
            unpacked=self.inspect_max_unpacked,
            expansion=self.inspect_max_expansion,
            members=self.inspect_max_members,
        )

    @property
    def analysis_limits(self) -> AnalysisLimits:
        """What analysing one stored Kineto trace may hold in memory."""
        return AnalysisLimits(
            sort_memory=self.analysis_memory, collectives=self.straggler_collectives
        )

    @property
    def url_lifetime(self) -> timedelta:
        """The longest a presigned URL lives: how long a replaced signing key still verifies."""
        return max(self.part_url_ttl, self.download_url_ttl)


def _variable(field: str) -> str:
    return PREFIX + field.upper()


def _nearest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_variables(environ: Mapping[str, str], fields: Iterable[str]) -> list[str]:
    """A warning for each ``TRACESTORE_*`` variable that names no setting."""
    known = {_variable(f) for f in fields} | OTHER_VARIABLES
    return [
        f"{name} is not a tracestore setting and is ignored{_nearest(name, known)}"
        for name in sorted(environ)
        if name.startswith(PREFIX) and name not in known and not name.startswith(OTHER_PREFIXES)
    ]


def _read_config(path: str, fields: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """The TOML file's values by field name (``TRACESTORE_X`` keys too), and a warning
    for each key that names no setting."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise SettingsError(f"TRACESTORE_CONFIG={path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"TRACESTORE_CONFIG={path}: not valid TOML ({exc})") from None
    names = set(fields)
    values: dict[str, Any] = {}
    warnings = []
    for key, value in document.items():
        name = key.lower().removeprefix(PREFIX.lower())
        if name in names:
            values[name] = value
        else:
            as_variable = key.upper().startswith(PREFIX)
            options = [_variable(n) for n in names] if as_variable else names
            warnings.append(
                f"{path}: key {key!r} is not a tracestore setting and is ignored"
                + _nearest(key.upper() if as_variable else key.lower(), options)
            )
    return values, warnings


def _problems(
    exc: PydanticValidationError,
    file_values: Mapping[str, Any],
    env_names: set[str],
    config: str | None,
) -> str:
    """One line per refused setting: where it came from, the value, what was expected."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "settings"
        if field in env_names:
            source = f"{_variable(field)}={os.environ[_variable(field)]}"
        elif field in file_values:
            source = f"{config}: {field} = {file_values[field]!r}"
        else:
            source = f"{_variable(field)}={error.get('input')!r}"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{source}: {message}")
    return "\n".join(lines)
