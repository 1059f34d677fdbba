"""Settings: one object, built once at start from ``TRACESTORE_*`` and passed in.

Every value has a zero-configuration default: a SQLite file and a blob directory inside
``./tracestore-data``. A TOML file named by ``TRACESTORE_CONFIG`` may supply values; the
environment wins over the file, and keyword arguments win over both.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB
MAX_PARTS_PER_FILE = 10_000


class Settings(BaseSettings):
    """Everything the service reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="TRACESTORE_", extra="ignore")

    data_dir: Path = Path("./tracestore-data")
    database_url: str | None = None
    blob_url: str | None = None
    s3_endpoint_url: str | None = None
    public_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000

    part_size: int = Field(default=64 * MIB, ge=MIN_PART_SIZE)
    max_files_per_upload: int = Field(default=10_000, ge=1)
    max_json_body: int = Field(default=16 * MIB, ge=1024)
    default_ttl_days: int = Field(default=7, ge=1, le=365)
    session_ttl: timedelta = timedelta(hours=24)
    part_url_ttl: timedelta = timedelta(hours=1)
    download_url_ttl: timedelta = timedelta(minutes=15)
    purge_grace: timedelta = timedelta(hours=24)
    completion_lease: timedelta = timedelta(seconds=60)
    sweep_interval: timedelta = timedelta(minutes=5)

    signing_key: str | None = None

    jwks_url: str | None = None
    jwks_file: Path | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    jwt_user_claim: str = "sub"
    jwt_tenant_claim: str = "tenant"
    jwt_workspaces_claim: str = "workspaces"
    jwt_admin_claim: str = "tenant_admin"

    # What one upload may ask of the service: bytes declared in all, part URLs per answer.
    max_upload_size: int = Field(default=5 * 1024**4, ge=1)
    part_urls_per_answer: int = Field(default=10_000, ge=1)

    @field_validator("jwt_algorithms")
    @classmethod
    def _only_asymmetric(cls, value: list[str]) -> list[str]:
        allowed = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}
        bad = [alg for alg in value if alg not in allowed]
        if bad:
            raise ValueError(f"unsupported JWT algorithms {bad}; allowed: {sorted(allowed)}")
        return value

    @classmethod
    def load(cls, **overrides: Any) -> Settings:
        """Build settings from the optional TOML file, the environment and ``overrides``."""
        file_values: dict[str, Any] = {}
        config = os.environ.get("TRACESTORE_CONFIG")
        if config:
            with open(config, "rb") as handle:
                file_values = {k.lower(): v for k, v in tomllib.load(handle).items()}
        env_names = {
            name for name in cls.model_fields if f"TRACESTORE_{name.upper()}" in os.environ
        }
        values = {k: v for k, v in file_values.items() if k not in env_names}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

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
    def resolved_public_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        return f"http://{self.host}:{self.port}"

    def signing_key_bytes(self) -> bytes:
        """The HMAC key for presigned URLs; generated into the data directory when absent."""
        if self.signing_key:
            return self.signing_key.encode()
        path = self.data_dir / "signing-key"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".signing-key.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(48))
            # link() fails if another process won the race; then its key is the key.
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return path.read_text().strip().encode()
