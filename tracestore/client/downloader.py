"""Fetching a traceset's files in parallel, each verified (used by ``Client``).

The ``Downloader`` is handed what it needs (the http client, the retry policy and the call
that answers a file's download URL), never the ``Client``, so this module does not import
the client back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from tracestore import schemas
from tracestore.client.retries import RetryPolicy
from tracestore.client.transfers import ProgressCallback, download_to
from tracestore.errors import IntegrityError, ValidationError

DownloadUrlCall = Callable[[str, str], schemas.DownloadAnswer]


@dataclass(frozen=True)
class Downloader:
    """Fetches files through ``http`` with ``retry``; ``download_url`` is
    ``Client.download_url`` (asked again when a URL expires)."""

    http: httpx.Client
    retry: RetryPolicy
    download_url: DownloadUrlCall

    def fetch(
        self,
        traceset_id: str,
        entry: schemas.FileResponse,
        destination: Path,
        progress: ProgressCallback | None,
        total: int,
        stop: threading.Event | None = None,
    ) -> Path:
        """One file to ``destination``, resumed from its ``.partial`` and verified."""
        sha256 = entry.hash.removeprefix("sha256:") if entry.hash else None
        return download_to(
            self.http,
            lambda: self.download_url(traceset_id, entry.name).url,
            destination,
            size=entry.size,
            sha256=sha256,
            retry=self.retry,
            progress=progress,
            label=entry.name,
            total=total,
            stop=stop,
        )

    def fetch_all(
        self,
        traceset_id: str,
        wanted: Sequence[schemas.FileResponse],
        root: Path,
        concurrency: int,
        progress: ProgressCallback | None,
    ) -> list[Path]:
        """Every file of ``wanted`` under ``root``, ``concurrency`` at a time."""
        for entry in wanted:
            # Never write outside ``root``, whatever name a service answers.
            if schemas.file_name_problem(entry.name):
                raise IntegrityError(f"The service answered an unsafe file name {entry.name!r}")
        # Stored before the service refused such names: one would overwrite the other.
        collision = schemas.name_collision(entry.name for entry in wanted)
        if collision:
            raise ValidationError(f"{collision}; download one of them at a time, to another path")
        total = sum(f.size for f in wanted)
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="ts-get")
        try:
            futures = [
                pool.submit(self.fetch, traceset_id, e, root / e.name, progress, total, stop)
                for e in wanted
            ]
            return [f.result() for f in futures]
        except BaseException:
            stop.set()  # Ctrl-C or a failed file: the others stop too, their partials stay
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
