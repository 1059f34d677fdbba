"""Hashing an upload's files before the upload knows its parts: on a thread of its own.

A ``tracestore upload`` spends its first ~0.2 s importing the client and asking for the
session, with one core busy and the other idle. ``ReadAhead`` uses that core: it reads the
files from their first byte and keeps the SHA-256 state after every ``chunk`` bytes. When
the session is there, the uploader stops it and starts each file's digest after the
whole parts it covers (``FileDigest.adopt``); those parts then go out by ``sendfile``
without being read or hashed again. A file that is not the one it read (another inode,
size, modification or change time) is hashed as it goes, as without a read-ahead; the
service verifies every file's declared hash, so bytes that changed between the read-ahead
and the send unnoticed make the completion fail, never a wrong blob.

It reads regular files only, never past the size they had when opened, and at most
``LIMIT`` bytes of ``FILES`` files: what a start of a fraction of a second can use.

Standard library only (the command line starts it before importing the client).
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

CHUNK = 8 * 1024 * 1024
"""Bytes per read and per hash update. Large, so that each time the thread waits for the
interpreter lock (up to its 5 ms switch interval while the other thread imports) it then
hashes for several ms without it; the default part size (64 MiB) is a multiple."""

LIMIT = 1024 * 1024 * 1024
"""Bytes read ahead at most. A command's start reads a few hundred MiB here; the limit
bounds the reading a start held up for long (a service retried until it answers, or never
does) spends on files whose upload may not come."""

FILES = 1000
"""Files looked at, at most. Each costs the thread Python work (a walk step, an open, a
stat) under the interpreter lock the starting command needs too, and some memory; a start
reaches a few hundred files of 1 MiB here."""


def walk_files(given: Path) -> Iterator[tuple[str, Path]]:
    """The files an upload takes from ``given``: a directory's files in sorted order, named
    relative to it; a file by its base name; nothing for anything else."""
    if given.is_dir():
        for root, dirs, names in os.walk(given):
            dirs.sort()
            for name in sorted(names):
                member = Path(root, name)
                if member.is_file():
                    yield member.relative_to(given).as_posix(), member
    elif given.is_file():
        yield given.name, given


class _Version(NamedTuple):
    """What says a file is still the one that was read: the same inode, unchanged."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> _Version:
        return cls(
            status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
        )


class _Hashed:
    """One file read ahead: its version, and the SHA-256 state after each chunk read (after
    the whole file only, once it was read to its end)."""

    __slots__ = ("states", "version")

    def __init__(self, version: _Version) -> None:
        self.version = version
        self.states: dict[int, hashlib._Hash] = {}


class ReadAhead:
    """Reads and hashes the files under ``paths`` (as ``walk_files`` finds them), in order,
    from ``start()`` until ``stop()``; ``prefix`` answers what it hashed of one file."""

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        chunk: int = CHUNK,
        limit: int = LIMIT,
        files: int = FILES,
    ) -> None:
        if chunk <= 0:
            raise ValueError("chunk must be positive")
        self._paths = [Path(p) for p in paths]
        self._chunk = chunk
        self._left = limit
        self._files = files
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._hashed: dict[Path, _Hashed] = {}
        self._thread = threading.Thread(target=self._run, name="ts-read-ahead", daemon=True)

    def start(self) -> ReadAhead:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading (within one chunk); what was hashed stays available."""
        self._stopped.set()

    def close(self, timeout: float = 1.0) -> None:
        """Stop, and wait up to ``timeout`` seconds for the thread to end. A read that
        blocks (a file on a network file system that stopped answering) does not hold the
        command: the thread is a daemon."""
        self.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> ReadAhead:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def prefix(
        self, path: Path, size: int, mtime_ns: int, part_size: int
    ) -> tuple[int, hashlib._Hash] | None:
        """The most whole parts of ``part_size`` at the start of ``path`` that were hashed,
        with the SHA-256 state after them, if the file is still the one that was read and
        has ``size`` bytes and modification time ``mtime_ns`` (as the upload saw it); None
        when there are none."""
        with self._lock:
            hashed = self._hashed.get(path)
        if hashed is None:
            return None
        try:
            now = _Version.of(os.stat(path))
        except OSError:
            return None
        if now != hashed.version or (now.size, now.mtime_ns) != (size, mtime_ns):
            return None
        part_count = max(1, -(-size // part_size))
        with self._lock:
            for parts in range(part_count, 0, -1):
                state = hashed.states.get(min(parts * part_size, size))
                if state is not None:
                    return parts, state.copy()
        return None

    def _run(self) -> None:
        buffer = memoryview(bytearray(self._chunk))
        looked_at = 0
        for given in self._paths:
            try:
                for _, path in walk_files(given):
                    if self._stopped.is_set() or self._left <= 0 or looked_at >= self._files:
                        return
                    looked_at += 1
                    if path not in self._hashed:  # a path given twice, or inside another
                        self._hash(path, buffer)
            except OSError:
                continue  # unreadable: the upload itself reads it, and says what is wrong

    def _hash(self, path: Path, buffer: memoryview) -> None:
        try:
            # Non-blocking: a FIFO put in a regular file's place must not hold the thread.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            self._hash_open(path, fd, buffer)
        except OSError:
            with self._lock:
                self._hashed.pop(path, None)
        finally:
            os.close(fd)

    def _hash_open(self, path: Path, fd: int, buffer: memoryview) -> None:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return
        hashed, sha = _Hashed(_Version.of(status)), hashlib.sha256()
        size, offset = status.st_size, 0
        if size == 0:  # read nothing: a kernel file of size 0 (/proc/kmsg) may never answer
            hashed.states[0] = sha
            with self._lock:
                self._hashed[path] = hashed
            return
        while offset < size and not self._stopped.is_set() and self._left > 0:
            n = os.readv(fd, [buffer[: min(len(buffer), self._left, size - offset)]])
            if n == 0 or _Version.of(os.fstat(fd)) != hashed.version:
                # Shorter than it was, or written to meanwhile: what was read may mix old
                # and new bytes.
                with self._lock:
                    self._hashed.pop(path, None)
                return
            sha.update(buffer[:n])
            offset += n
            self._left -= n
            with self._lock:
                if offset == size:  # read whole: only the state after all of it is of use
                    hashed.states = {size: sha}
                else:
                    hashed.states[offset] = sha.copy()
                self._hashed[path] = hashed
