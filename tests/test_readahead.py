"""ReadAhead: an upload's files hashed from their first byte on a thread of their own, before
the upload knows its part size; what it hashed is used only for a file as it still is."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracestore.readahead import ReadAhead, walk_files


def tree(root: Path) -> dict[str, bytes]:
    files = {
        "b/rank_1.json": os.urandom(40_000),
        "a.json": os.urandom(12_288),
        "b/empty": b"",
        "b/c/rank_0.json": os.urandom(5),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def finished(*paths: Path, chunk: int) -> ReadAhead:
    with ReadAhead(paths, chunk=chunk) as ahead:
        ahead._thread.join(timeout=30)  # let it read everything before it is stopped
    return ahead


def key(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def test_walk_files_names_a_directorys_files_relative_to_it_in_sorted_order(
    tmp_path: Path,
) -> None:
    tree(tmp_path / "run")
    (tmp_path / "one.bin").write_bytes(b"x")
    assert [name for name, _ in walk_files(tmp_path / "run")] == [
        "a.json",
        "b/empty",
        "b/rank_1.json",
        "b/c/rank_0.json",
    ]
    assert list(walk_files(tmp_path / "one.bin")) == [("one.bin", tmp_path / "one.bin")]
    assert list(walk_files(tmp_path / "missing")) == []


def test_every_file_is_hashed_and_answered_at_the_part_boundaries_it_read_past(
    tmp_path: Path,
) -> None:
    files = tree(tmp_path / "run")
    ahead = finished(tmp_path / "run", chunk=4096)
    for name, data in files.items():
        path = tmp_path / "run" / name
        # The whole file, whatever the part size, as one or many parts.
        for part_size in (4096, 5000, 1 << 20):
            hashed = ahead.prefix(path, *key(path), part_size=part_size)
            assert hashed is not None
            parts, state = hashed
            assert parts == max(1, -(-len(data) // part_size))
            assert state.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_stop_mid_file_leaves_the_whole_parts_before_it(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    data = os.urandom(10 * 4096 + 7)
    path.write_bytes(data)
    ahead = ReadAhead([path], chunk=4096)
    buffer = memoryview(bytearray(4096))
    reads = 0
    real = ahead._stopped.is_set

    def stop_after_five_reads() -> bool:
        nonlocal reads
        reads += 1
        return reads > 5 or real()

    ahead._stopped.is_set = stop_after_five_reads  # type: ignore[method-assign]
    ahead._hash(path, buffer)
    # Five chunks read, 20,480 bytes: two whole parts of 8,192, one of 12,288, none of 24,576.
    two = ahead.prefix(path, *key(path), part_size=8192)
    assert two is not None and two[0] == 2
    assert two[1].hexdigest() == hashlib.sha256(data[: 2 * 8192]).hexdigest()
    three = ahead.prefix(path, *key(path), part_size=12288)
    assert three is not None and three[0] == 1
    assert three[1].hexdigest() == hashlib.sha256(data[:12288]).hexdigest()
    assert ahead.prefix(path, *key(path), part_size=6 * 4096) is None


def test_a_file_changed_since_it_was_read_ahead_is_not_answered(tmp_path: Path) -> None:
    path = tmp_path / "rank_0.json"
    path.write_bytes(b"before")
    ahead = finished(path, chunk=4096)
    size, mtime_ns = key(path)
    assert ahead.prefix(path, size, mtime_ns, part_size=4096) is not None
    assert ahead.prefix(path, size, mtime_ns + 1, part_size=4096) is None
    assert ahead.prefix(path, size + 1, mtime_ns, part_size=4096) is None
    assert ahead.prefix(tmp_path / "other", size, mtime_ns, part_size=4096) is None


def test_stopped_before_it_starts_it_hashes_nothing(tmp_path: Path) -> None:
    files = tree(tmp_path / "run")
    ahead = ReadAhead([tmp_path / "run"], chunk=4096)
    ahead.stop()
    with ahead:
        pass
    for name in files:
        path = tmp_path / "run" / name
        assert ahead.prefix(path, *key(path), part_size=4096) is None


def test_an_unreadable_or_missing_path_is_left_to_the_upload_to_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked.bin"
    locked.write_bytes(b"secret")
    readable = tmp_path / "open.bin"
    readable.write_bytes(b"fine")
    real_open = os.open

    def refusing(path: Path, *args: Any, **kwargs: Any) -> int:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied (injected)", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    ahead = finished(tmp_path / "missing", locked, readable, chunk=4096)
    assert ahead.prefix(locked, *key(locked), part_size=4096) is None
    assert ahead.prefix(readable, *key(readable), part_size=4096) is not None


def test_a_chunk_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunk"):
        ReadAhead([], chunk=0)


def test_it_reads_no_more_than_its_limit(tmp_path: Path) -> None:
    files = {f"rank_{n}.bin": os.urandom(3 * 4096) for n in range(3)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    ahead = ReadAhead([tmp_path], chunk=4096, limit=4 * 4096)
    ahead.start()
    ahead._thread.join(timeout=30)
    assert not ahead._thread.is_alive()  # it stopped by itself at the limit
    first, second = tmp_path / "rank_0.bin", tmp_path / "rank_1.bin"
    whole = ahead.prefix(first, *key(first), part_size=4096)
    assert whole is not None and whole[0] == 3
    begun = ahead.prefix(second, *key(second), part_size=4096)
    assert begun is not None and begun[0] == 1
    assert begun[1].hexdigest() == hashlib.sha256(files["rank_1.bin"][:4096]).hexdigest()
    third = tmp_path / "rank_2.bin"
    assert ahead.prefix(third, *key(third), part_size=4096) is None


def stop_checks(ahead: ReadAhead, on_check: Callable[[int], None]) -> None:
    """Calls ``on_check(n)`` at the thread's n-th look at whether it was stopped (once per
    chunk read), before it looks."""
    checks = 0
    real = ahead._stopped.is_set

    def checked() -> bool:
        nonlocal checks
        checks += 1
        on_check(checks)
        return real()

    ahead._stopped.is_set = checked  # type: ignore[method-assign]


def test_a_file_written_to_while_it_is_read_ahead_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "rank_0.json"
    path.write_bytes(os.urandom(4 * 4096))
    ahead = ReadAhead([path], chunk=4096)

    def write_after_two_reads(check: int) -> None:
        if check == 3:
            with open(path, "r+b") as again:  # same size, new bytes, a moment later
                again.write(b"new")
            os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))

    stop_checks(ahead, write_after_two_reads)
    ahead._hash(path, memoryview(bytearray(4096)))
    for part_size in (4096, 4 * 4096):
        assert ahead.prefix(path, *key(path), part_size=part_size) is None


def test_a_file_replaced_by_one_of_the_same_size_and_time_is_not_answered(
    tmp_path: Path,
) -> None:
    # As rsync -a, cp -p or tar x leave it: other bytes under the same size and mtime.
    path = tmp_path / "rank_0.json"
    path.write_bytes(os.urandom(3 * 4096))
    ahead = finished(path, chunk=4096)
    before = key(path)
    assert ahead.prefix(path, *before, part_size=4096) is not None
    fresh = tmp_path / ".rank_0.json.tmp"
    fresh.write_bytes(os.urandom(3 * 4096))
    os.utime(fresh, ns=(0, before[1]))
    fresh.replace(path)
    assert key(path) == before
    assert ahead.prefix(path, *before, part_size=4096) is None


def test_only_regular_files_are_read_and_none_past_the_size_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "rank_0.json"
    os.mkfifo(fifo)  # e.g. put in a file's place after the walk saw a file there
    ahead = ReadAhead([fifo], chunk=4096)
    ahead._hash(fifo, memoryview(bytearray(4096)))  # returns at once: nothing waits
    assert ahead._hashed == {}

    path = tmp_path / "log.bin"
    data = os.urandom(4096 + 100)
    path.write_bytes(data)
    asked: list[int] = []
    real_readv = os.readv

    def readv(fd: int, buffers: list[memoryview]) -> int:
        asked.append(sum(len(b) for b in buffers))
        return real_readv(fd, buffers)

    monkeypatch.setattr(os, "readv", readv)
    ahead = finished(path, chunk=4096)
    assert asked == [4096, 100]
    hashed = ahead.prefix(path, *key(path), part_size=4096)
    assert hashed is not None and hashed[1].hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_path_given_twice_or_inside_another_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = tree(tmp_path / "run")
    opened: list[Path] = []
    real_open = os.open

    def counting(path: Path, *args: Any, **kwargs: Any) -> int:
        opened.append(Path(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    finished(tmp_path / "run", tmp_path / "run", chunk=4096)
    assert sorted(opened) == sorted(tmp_path / "run" / name for name in files)


def test_it_looks_at_no_more_files_than_its_limit(tmp_path: Path) -> None:
    tree(tmp_path / "run")
    with ReadAhead([tmp_path / "run"], chunk=4096, files=2) as ahead:
        ahead._thread.join(timeout=30)
    assert sorted(ahead._hashed) == [tmp_path / "run" / "a.json", tmp_path / "run" / "b/empty"]


def test_closing_does_not_wait_for_a_read_that_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "on-a-stuck-mount.bin"
    path.write_bytes(b"x" * 4096)
    entered, release = threading.Event(), threading.Event()

    def stuck(fd: int, buffers: list[memoryview]) -> int:
        entered.set()
        release.wait(30)
        return 0

    monkeypatch.setattr(os, "readv", stuck)
    ahead = ReadAhead([path], chunk=4096).start()
    assert entered.wait(30)
    started = time.monotonic()
    ahead.close(timeout=0.2)
    assert time.monotonic() - started < 5
    release.set()
    ahead._thread.join(30)


def test_an_empty_file_is_one_hashed_part_and_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel file of size 0 (/proc/kmsg) may block its reader forever.
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    monkeypatch.setattr(os, "readv", None)
    hashed = finished(path, chunk=4096).prefix(path, *key(path), part_size=4096)
    assert hashed is not None and hashed[0] == 1
    assert hashed[1].hexdigest() == hashlib.sha256(b"").hexdigest()
