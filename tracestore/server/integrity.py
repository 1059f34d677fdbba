"""validate's ``file_integrity`` check: every file's blob is present, and its size and SHA-256
are what was recorded.

Re-hashing is the one part of validate whose work grows with the stored bytes, and anyone who
may read a traceset may ask for it: 48 readers looping validate on two 320 MiB tracesets
re-hashed 45 GiB in 30 s (issue 41). So this process keeps, per blob, when it last re-hashed
it and what that showed (``VerifiedBlobs``): a blob is re-hashed at most once per
``TRACESTORE_REVERIFY_INTERVAL`` (0: at every validate), and validates asking for a blob being
re-hashed wait for that one read instead of starting their own. Within the interval a blob
verified whole is still looked for (``blob_exists``, no read), so one removed since is
reported at once; bytes changed in place are caught by the first re-hash the interval allows.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tracestore import schemas
from tracestore.server import db
from tracestore.server.storage.blobs import ContentStore

CHUNK = 4 * 1024 * 1024
# Records are dropped once expired, when the record has doubled since it was last pruned.
_PRUNE_FROM = 1024


@dataclass
class _Reread:
    """One blob's re-hash: when it ran, and what it showed (its size, or what is wrong)."""

    at: datetime
    outcome: int | str = 0
    done: threading.Event = field(default_factory=threading.Event)


class VerifiedBlobs:
    """This process's record of the blobs it re-hashed (module doc); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rereads: dict[str, _Reread] = {}
        self._pruned_at = _PRUNE_FROM

    def outcome(
        self, store: ContentStore, sha256: str, now: datetime, interval: timedelta
    ) -> tuple[int | str, datetime]:
        """The blob's size after hashing it whole, or why it is not the recorded blob; and
        when those bytes were last read whole. Re-hashes only when no read is running and
        the last one is older than ``interval`` (or found a problem: a problem is looked at
        afresh each time, so a blob restored is seen as soon as it is back)."""
        with self._lock:
            last = self._rereads.get(sha256)
            fresh = last is not None and (
                not last.done.is_set()
                or (isinstance(last.outcome, int) and now - last.at < interval)
            )
            if not fresh:
                last = self._rereads[sha256] = _Reread(now)
                self._prune(now, interval)
                mine = True
            else:
                mine = False
        assert last is not None
        if mine:
            try:
                last.outcome = _reread_blob(store, sha256)
            except BaseException as exc:
                last.outcome = f"its blob sha256:{sha256} could not be read ({exc})"
                raise
            finally:
                last.done.set()
            return last.outcome, last.at
        last.done.wait()
        if isinstance(last.outcome, int) and not store.blob_exists(sha256):
            return f"its blob sha256:{sha256} is missing", now
        return last.outcome, last.at

    def _prune(self, now: datetime, interval: timedelta) -> None:
        if len(self._rereads) < 2 * self._pruned_at:
            return
        self._rereads = {
            sha256: reread
            for sha256, reread in self._rereads.items()
            if not reread.done.is_set() or now - reread.at < interval
        }
        self._pruned_at = max(_PRUNE_FROM, len(self._rereads))


def file_integrity(
    store: ContentStore,
    files: Sequence[db.TracesetFile],
    verified: VerifiedBlobs,
    now: datetime,
    interval: timedelta,
) -> schemas.ValidationCheck:
    """Every file's blob is present, and its size and SHA-256 are what was recorded (each
    blob re-hashed at most once per ``interval``: module doc)."""
    problems: list[str] = []
    read: dict[str, int | str] = {}  # per blob: the bytes read, or what is wrong with it
    oldest = now
    for file in files:
        if file.sha256 is None:
            problems.append(f"'{file.name}' has no stored bytes")
            continue
        if file.sha256 not in read:
            read[file.sha256], at = verified.outcome(store, file.sha256, now, interval)
            oldest = min(oldest, at)
        outcome = read[file.sha256]
        if isinstance(outcome, str):
            problems.append(f"'{file.name}': {outcome}")
        elif outcome != file.size:
            problems.append(f"'{file.name}' is {outcome} bytes; {file.size} were recorded")
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        return schemas.ValidationCheck(
            name="file_integrity", passed=False, message="; ".join(problems[:5]) + more
        )
    total = sum(f.size for f in files)
    since = f"; bytes last read whole at {schemas.format_timestamp(oldest)}" if oldest < now else ""
    return schemas.ValidationCheck(
        name="file_integrity",
        passed=True,
        message=f"{len(files)} files present; sizes and SHA-256 re-verified ({total} bytes{since})",
    )


def _reread_blob(store: ContentStore, sha256: str) -> int | str:
    """The blob's size after hashing it whole, or why it is not the recorded blob."""
    digest = hashlib.sha256()
    size = 0
    try:
        with store.open_blob(sha256) as source:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return f"its blob sha256:{sha256} is missing"
    if digest.hexdigest() != sha256:
        return f"its bytes hash to sha256:{digest.hexdigest()}, not the recorded sha256:{sha256}"
    return size
