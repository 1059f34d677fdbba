"""The service's parts, built once from Settings and handed to every use case."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from sqlalchemy import text

from tracestore.errors import ServiceUnavailable
from tracestore.server.auth import TokenCache
from tracestore.server.db.database import Database, shown_url, utcnow
from tracestore.server.integrity import VerifiedBlobs
from tracestore.server.jwt_auth import JwtVerifier
from tracestore.server.presigned import KEY_REFRESH, UrlSigner, signing_keys
from tracestore.server.settings import Settings
from tracestore.server.storage.blobs import BlobStore, private_directory
from tracestore.server.storage.local import LocalBlobStore

Clock = Callable[[], datetime]


class JobRunner(Protocol):
    """This process's worker (``worker.Worker``), as the services see it."""

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""

    def drain(self) -> None:
        """Return once no job this process could run now is queued or running here."""

    def stop(self) -> None:
        """Stop taking jobs; hand back the one running, if it does not end soon."""


@dataclass
class Services:
    settings: Settings
    db: Database
    store: BlobStore
    signer: UrlSigner  # every presigned URL the service answers itself (the store's too)
    clock: Clock = field(default=utcnow)
    jwt_verifier: JwtVerifier | None = None  # set when a JWKS is configured
    token_cache: TokenCache = field(default_factory=lambda: TokenCache(0))
    worker: JobRunner | None = None  # set while the app's lifespan runs one
    # The blobs validate re-hashed here, and when (TRACESTORE_REVERIFY_INTERVAL).
    verified_blobs: VerifiedBlobs = field(default_factory=VerifiedBlobs)

    def now(self) -> datetime:
        return self.clock()

    @cached_property
    def part_origin(self) -> str | None:
        """Where browsers send parts when not to this service: the bucket's origin (the
        page's policy must allow it), worked out once."""
        return self.store.part_origin()

    _background: ThreadPoolExecutor | None = field(default=None, repr=False)
    _background_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run_in_background(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on this process's one background thread (removing a completed
        upload's staged bytes), in the order handed over: work that may be lost with the
        process (the sweeper finds its leftovers); durable work is a job (``jobs.py``)."""
        with self._background_lock:
            if self._background is None:
                self._background = ThreadPoolExecutor(1, thread_name_prefix="tracestore-bg")
            self._background.submit(fn, *args)

    def wake_worker(self) -> None:
        """Tell this process's worker, if it runs one, that a job was queued."""
        if self.worker is not None:
            self.worker.wake()

    def wait_for_background(self) -> None:
        """Return once the work handed to the background thread so far is done, and this
        process's worker (when the app runs one) has run every job due now."""
        with self._background_lock:
            background = self._background
        if background is not None:
            background.submit(lambda: None).result()
        if self.worker is not None:
            self.worker.drain()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self._background is not None:
            self._background.shutdown(wait=True)
        self.db.dispose()

    def readiness(self) -> dict[str, str]:
        """Check the database and the blob store; ServiceUnavailable names each that failed
        and why."""
        failures = self.failures()
        if failures:
            raise ServiceUnavailable("Not ready: " + "; ".join(failures))
        return {"database": "ok", "blobStore": "ok"}

    def failures(self, *, write: bool = False) -> list[str]:
        """One line per dependency that does not answer (``write``: the blob store must
        take an object too), naming it, why, and the setting to fix."""
        failures = []
        try:
            with self.db.session(write=False) as session:
                session.execute(text("SELECT 1"))
        except Exception as exc:
            failures.append(
                f"database {shown_url(self.db.url)}: {failure_reason(exc)} "
                "(TRACESTORE_DATABASE_URL)"
            )
        try:
            self.store.check(write=write)
        except Exception as exc:
            failures.append(f"blob store: {failure_reason(exc)}")
        return failures


def failure_reason(exc: BaseException) -> str:
    """One line saying why ``exc`` happened: the driver's own first line for a database
    error, the message otherwise."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def build_services(settings: Settings, *, clock: Clock = utcnow) -> Services:
    """Open the database (migrated to the newest schema) and the blob store, and the JWT
    verifier when a JWKS is configured."""
    verifier = JwtVerifier.from_settings(settings)
    private_directory(settings.data_dir)
    database = Database(settings.resolved_database_url)
    database.migrate()
    signer = url_signer(settings, database, clock)
    return Services(
        settings=settings,
        db=database,
        store=open_blob_store(settings, signer),
        signer=signer,
        clock=clock,
        jwt_verifier=verifier,
        token_cache=TokenCache(settings.token_cache_seconds),
    )


def url_signer(settings: Settings, database: Database, clock: Clock = utcnow) -> UrlSigner:
    """The signer of ``settings.signing_key`` when set, else of the database's shared keys
    (reread now and then, so a rotation reaches every process)."""
    if settings.signing_key:
        return UrlSigner(settings.signing_key.encode())
    # A key replaced just after a process reread them may sign for one more KEY_REFRESH.
    lifetime = settings.url_lifetime + KEY_REFRESH

    def load() -> list[bytes]:
        return signing_keys(database, clock(), lifetime, settings.data_dir / "signing-key")

    keys = load()
    return UrlSigner(keys[0], keys[1:], reload=load)


def stores_bytes_locally(settings: Settings) -> bool:
    """Whether the bytes are in the embedded store (``file://``), whose part and content
    URLs the service answers itself. (Not by ``resolved_blob_url``: resolving the
    default's path is a few system calls, and upload-url asks each time.)"""
    return not settings.blob_url or settings.blob_url.startswith("file://")


def open_blob_store(settings: Settings, signer: UrlSigner) -> BlobStore:
    """The store ``settings`` name; the embedded one presigns with ``signer``."""
    url = settings.resolved_blob_url
    if url.startswith("s3://"):
        from tracestore.server.storage.s3 import S3BlobStore

        return S3BlobStore.from_url(url, endpoint_url=settings.s3_endpoint_url)
    if stores_bytes_locally(settings):
        root = Path(unquote(urlparse(url).path))
        return LocalBlobStore(root, signer)
    raise ValueError(f"TRACESTORE_BLOB_URL must start with file:// or s3://, got {url!r}")
