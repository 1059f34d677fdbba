"""The local files of an upload: found under the paths given, their names checked before any
request is made, and their SHA-256 read in large chunks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracestore import schemas
from tracestore.errors import IntegrityError, ValidationError
from tracestore.readahead import walk_files

HASH_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its name in the traceset, where it is, its size and role, and its
    modification time when it was found (a later one means it changed meanwhile)."""

    name: str
    path: Path
    size: int
    role: schemas.Role
    mtime_ns: int

    def changed(self) -> bool:
        """Whether the file's size or modification time differ from when it was found;
        raises ``IntegrityError`` if its size does."""
        now = self.path.stat()
        if now.st_size != self.size:
            raise IntegrityError(
                f"{self.path} changed size while it was being uploaded "
                f"({self.size} bytes, now {now.st_size})"
            )
        return now.st_mtime_ns != self.mtime_ns


def collect_files(paths: Sequence[str | os.PathLike[str]], role: schemas.Role) -> list[LocalFile]:
    """Files named by ``paths``; a directory contributes its files, named relative to it."""
    found: list[LocalFile] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise ValidationError(f"{path} does not exist")
        if not (path.is_dir() or path.is_file()):
            raise ValidationError(f"{path} is neither a file nor a directory")
        found += [_local(name, member, role) for name, member in walk_files(path)]
    return found


def _local(name: str, path: Path, role: schemas.Role) -> LocalFile:
    stat = path.stat()
    return LocalFile(name, path, stat.st_size, role, stat.st_mtime_ns)


def check_names(files: Sequence[LocalFile]) -> None:
    """Refuse names the service would refuse (duplicates and names that collide on disk
    included) before any request is made."""
    seen: dict[str, Path] = {}
    for file in files:
        problem = schemas.file_name_problem(file.name)
        if problem:
            raise ValidationError(f"File name {file.name!r} ({file.path}) {problem}")
        if file.name in seen:
            raise ValidationError(
                f"File name {file.name!r} is given twice: {seen[file.name]} and {file.path}"
            )
        seen[file.name] = file.path
    collision = schemas.name_collision(seen)
    if collision:
        raise ValidationError(collision)


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file."""
    return file_digest(path).hexdigest()


def file_digest(path: Path) -> hashlib._Hash:
    """The SHA-256 state after a file's bytes, read once in large chunks into one reused
    buffer (a download resumed from a partial file goes on from it)."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as source:
        while n := source.readinto(view):
            digest.update(view[:n])
    return digest
