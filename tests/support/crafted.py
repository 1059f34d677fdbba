"""Crafted hostile trace files (issue 41), made in memory, sized by the caller to keep CI fast.

Each is what a hostile user uploads: a few bytes that unpack to gigabytes (a bomb of every
compression kind inspection undoes), archives of very many members, declarations far past
what is sent, numbers JSON can write but a double or a 64-bit column cannot hold. The
regression tests, the crash rounds and the hostile-input suite all draw on these.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from functools import cache

import zstandard

MIB = 1024 * 1024
KINETO_HEAD = (
    b'{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},'
    b' "traceEvents": ['
)
_SPACES = b" " * MIB


def kineto_bomb_content(size: int) -> Iterator[bytes]:
    """A rank-0 Kineto header, then ``size`` bytes of spaces, then its end: what the issue's
    ZIP unpacked to (2 GiB of spaces), in pieces of 1 MiB."""
    yield KINETO_HEAD
    for _ in range(size // MIB):
        yield _SPACES
    yield b"]}"


def _event_block(count: int) -> bytes:
    event = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "ts": 1, "dur": 1},'
    return event * count


def kineto_events_content(size: int) -> Iterator[bytes]:
    """A rank-0 Kineto trace of ``size`` bytes of real-looking events (the zstd bomb's)."""
    block = _event_block(MIB // 80)
    yield KINETO_HEAD
    for _ in range(size // len(block)):
        yield block
    yield b'{"ph": "X", "name": "end", "ts": 2, "dur": 1}]}'


def _compressed(content: Iterator[bytes], compress: Callable[[], object]) -> bytes:
    compressor = compress()
    out = [compressor.compress(piece) for piece in content]  # type: ignore[attr-defined]
    out.append(compressor.flush())  # type: ignore[attr-defined]
    return b"".join(out)


def compress(content: Iterator[bytes], kind: str) -> bytes:
    """``content`` as a stream of ``gzip``, ``zstd``, ``bzip2`` or ``xz``."""
    if kind == "gzip":
        return _compressed(content, lambda: _Gzip())
    if kind == "zstd":
        return _compressed(content, lambda: zstandard.ZstdCompressor(level=3).compressobj())
    if kind == "bzip2":
        return _compressed(content, lambda: bz2.BZ2Compressor(9))
    if kind == "xz":
        return _compressed(content, lambda: lzma.LZMACompressor(preset=1))
    raise ValueError(kind)


class _Gzip:
    """gzip as a compressor object (the gzip module has none)."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._file = gzip.GzipFile(fileobj=self._buffer, mode="wb", compresslevel=6, mtime=0)

    def compress(self, data: bytes) -> bytes:
        self._file.write(data)
        return b""

    def flush(self) -> bytes:
        self._file.close()
        return self._buffer.getvalue()


ZIP_METHODS = {
    "deflate": zipfile.ZIP_DEFLATED,
    "bzip2": zipfile.ZIP_BZIP2,
    "lzma": zipfile.ZIP_LZMA,
}


@cache
def zip_bomb(method: str, size: int) -> bytes:
    """A ZIP of one member ``rank0.json`` (``kineto_bomb_content(size)``) compressed with
    ``method``: with bzip2, 2 GiB of it is the issue's 1,791-byte ZIP."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", compression=ZIP_METHODS[method]) as archive,
        archive.open("rank0.json", "w", force_zip64=True) as member,
    ):
        for piece in kineto_bomb_content(size):
            member.write(piece)
    return buffer.getvalue()


@cache
def stream_bomb(kind: str, size: int, spaces: bool = False) -> bytes:
    """``kineto_events_content(size)`` as a ``.json.<kind>`` (the issue's zstd file), or
    with ``spaces`` ``kineto_bomb_content(size)`` (quicker to make as bzip2)."""
    content = kineto_bomb_content(size) if spaces else kineto_events_content(size)
    return compress(content, kind)


def pax_bomb(size: int) -> bytes:
    """A ``.tar.gz`` whose first header is a pax record of ``size`` bytes, which ``tarfile``
    reads whole before any member."""

    def content() -> Iterator[bytes]:
        info = tarfile.TarInfo("././@PaxHeader")
        info.type = tarfile.XHDTYPE
        info.size = size
        yield info.tobuf(format=tarfile.USTAR_FORMAT)
        for _ in range(size // MIB):
            yield _SPACES
        yield b"\0" * (2 * tarfile.BLOCKSIZE)

    return compress(content(), "gzip")


def _tar_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return header + data + padding


@cache
def tar_bomb(kind: str, size: int) -> bytes:
    """A tar of one member ``rank0.json`` of ``kineto_bomb_content(size)``, compressed with
    ``kind`` (``.tar.gz``, ``.tar.zst``, ``.tar.bz2``, ``.tar.xz``)."""

    def content() -> Iterator[bytes]:
        body = b"".join(kineto_bomb_content(0))
        info = tarfile.TarInfo("rank0.json")
        info.size = len(body) + size
        yield info.tobuf(format=tarfile.USTAR_FORMAT)
        yield KINETO_HEAD
        for _ in range(size // MIB):
            yield _SPACES
        yield b"]}"
        yield b"\0" * (-info.size % tarfile.BLOCKSIZE) + b"\0" * (2 * tarfile.BLOCKSIZE)

    return compress(content(), kind)


def kineto_trace(rank: int, events: bytes = b"") -> bytes:
    """A small Kineto trace of ``rank`` of 2 (``events``: more of its event list)."""
    return (
        b'{"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": 2}, "traceEvents": ['
        % rank
        + events
        + b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "ts": 10, "dur": 5}]}'
    )


@cache
def many_members_tar_gz(count: int, empty: bool = False) -> bytes:
    """A ``.tar.gz`` of ``count`` members: identical rank-0 Kineto traces ``rank0.json`` (the
    issue's 300,000), or ``empty`` files (its 1,000,000)."""
    member = _tar_member("rank0.json" if not empty else "empty", b"" if empty else kineto_trace(0))
    return compress(iter([member] * count + [b"\0" * (2 * tarfile.BLOCKSIZE)]), "gzip")


@cache
def many_members_zip(count: int) -> bytes:
    """A ZIP of ``count`` empty members (its central directory is ``count`` entries)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index in range(count):
            archive.writestr(f"m{index}", b"")
    return buffer.getvalue()


def nonfinite_kineto(rank: int = 0) -> bytes:
    """A Kineto trace whose event time is ``1e400`` (JSON, but no double: Infinity)."""
    return kineto_trace(rank, b'{"ph": "X", "name": "far", "ts": 1e400, "dur": 1e400},')


def huge_rank_kineto(rank: int = 10**30, world_size: int = 10**30 + 1) -> bytes:
    """A Kineto trace whose ``distributedInfo`` names a rank past 64 bits."""
    return (
        b'{"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d, '
        b'"pg_config": [{"pg_name": "0", "pg_size": %d, "ranks": [%d]}]}, "traceEvents": []}'
        % (rank, world_size, world_size, rank)
    )


def huge_pid_et(pid: int = 10**30) -> bytes:
    """A PyTorch execution trace whose pid is past 64 bits."""
    return b'{"schema": "1.0.2", "pid": %d, "nodes": [], "finish_ts": 1}' % pid


def group_sizes_kineto(sizes: range) -> bytes:
    """A Kineto trace of rank 0 declaring one process group per size in ``sizes`` (the
    issue's 74 KB file of 2,000 group sizes)."""
    groups = b",".join(
        b'{"pg_name": "%d", "pg_size": %d}' % (index, size) for index, size in enumerate(sizes)
    )
    return (
        b'{"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": %d, "pg_config": [%s]},'
        b' "traceEvents": []}' % (max(sizes, default=1), groups)
    )


# The seed's largest rank count: a declaration far past any set of files that is sent.
HUGE_DECLARATION = {"shape": {"rankCount": 2_147_483_647}}


def surrogate_kineto(rank: int = 0) -> bytes:
    """A Kineto trace whose strings hold JSON's escape of a lone surrogate (valid JSON, no
    Unicode text): a backend, a process group's name and description, a GPU's name, a
    collective's name."""
    lone = b"\\ud800"
    return (
        b'{"deviceProperties": [{"id": 0, "name": "H100' + lone + b'"}], '
        b'"distributedInfo": {"backend": "nccl' + lone + b'", "rank": %d, "world_size": 2, '
        b'"pg_config": [{"pg_name": "g' + lone + b'", "pg_desc": "d' + lone + b'", '
        b'"pg_size": 2, "ranks": [0, 1]}]}, "traceEvents": ['
        b'{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "ts": 1, '
        b'"dur": 2, "args": {"Collective name": "all' + lone + b'", "Rank": %d}}]}'
    ) % (rank, rank)


def surrogate_member_tar() -> bytes:
    """A tar whose member name is not UTF-8 (Python reads it with lone surrogates)."""
    buffer = io.BytesIO()
    data = kineto_trace(1)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        member = tarfile.TarInfo("\udcff\udcfex.json")  # the bytes ff fe, as Python reads them
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()
