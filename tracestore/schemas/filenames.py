"""The rules a traceset's file names follow: each a relative POSIX path of safe segments, and no
two that one directory tree could not hold together. Plain functions: the upload models check
with them, and the client before it sends a name or writes a file under one."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tracestore.jsontext import lone_surrogate

MAX_NAME_BYTES = 1024
_SEGMENT = re.compile(r"[A-Za-z0-9._+=@-]+")
# What file_name_problem accepts, as the OpenAPI description gives it (with a maxLength of
# MAX_NAME_BYTES: the characters are ASCII): segments of those characters, none "." or "..".
_CHAR, _NOT_DOT = "[A-Za-z0-9._+=@-]", "[A-Za-z0-9_+=@-]"
_PART = rf"(?:{_NOT_DOT}{_CHAR}*|\.{_NOT_DOT}{_CHAR}*|\.\.{_CHAR}+)"
NAME_PATTERN = rf"^{_PART}(?:/{_PART})*$"


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable file name, or None when it is."""
    if not name:
        return "is empty"
    surrogate = lone_surrogate(name)
    if surrogate is not None:  # a local name of bytes that are not UTF-8 (surrogateescape)
        return f"is not Unicode text: it holds a lone surrogate ({surrogate})"
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
