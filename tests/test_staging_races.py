"""The embedded store's staging under unlucky timing, driven on the store itself: a first
send that stalls while its part is sent again and the file is sealed, listings while parts
finish, a part that finishes after its staging is gone."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tracestore.errors import Conflict
from tracestore.server.presigned import UrlSigner
from tracestore.server.storage.blobs import StagedFile
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.staging import PartWriter

PART = 64 * 1024


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs", UrlSigner(b"k" * 32))


def _staged(parts: int = 2) -> StagedFile:
    return StagedFile("upload_abc", 0, parts * PART, PART)


def _send(store: LocalBlobStore, staged: StagedFile, number: int, data: bytes) -> PartWriter:
    writer = store.open_part_writer(staged, number, length_known=True)
    writer.write([data], checksum=False)
    return writer


def _stalled_and_resent(store: LocalBlobStore, staged: StagedFile) -> tuple[PartWriter, str, str]:
    """Part 1 whole; part 2's first send stalled after a few bytes, written in place; its
    re-send whole: the stalled writer, the two ETags."""
    first = _send(store, staged, 1, b"1" * PART).finish(None)
    stalled = _send(store, staged, 2, b"A" * 10)
    return stalled, first, _send(store, staged, 2, b"B" * PART).finish(None)


def _sealed_with_a_stalled_first_send(
    store: LocalBlobStore, staged: StagedFile
) -> tuple[PartWriter, str, str]:
    """``_stalled_and_resent``, then the file sealed (which rebuilt it)."""
    stalled, first, resent = _stalled_and_resent(store, staged)
    blob = store.seal_file(staged, {1: first, 2: resent})
    assert blob.sha256 == hashlib.sha256(b"1" * PART + b"B" * PART).hexdigest()
    return stalled, first, resent


def _a_later_send(store: LocalBlobStore, staged: StagedFile) -> PartWriter:
    """A send of part 2 after the seal, which must go to a file of its own."""
    late = store.open_part_writer(staged, 2, length_known=True)
    assert late._tmp is not None, "a send after the seal wrote in place"
    return late


def test_a_stalled_first_send_that_fails_after_the_seal_keeps_the_part_claimed(
    store: LocalBlobStore,
) -> None:
    # Its failure released the claim, so a later send wrote in place into the rebuilt
    # file, which is the blob: a blob whose bytes were not its name.
    staged = _staged()
    stalled, first, resent = _sealed_with_a_stalled_first_send(store, staged)
    stalled.abort()
    late = _a_later_send(store, staged)
    blob = store.seal_file(staged, {1: first, 2: resent})
    store.place_file(staged, blob)
    late.write([b"C" * PART], checksum=False)
    late.finish(None)
    stored = store.blob_path(blob.sha256).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == blob.sha256


def test_a_first_send_that_fails_while_the_seal_copies_leaves_no_way_in(
    store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failure lands between the seal's first claims and its replacement of the file,
    # and releases the claim (the file is still the one it wrote): the seal claims again
    # before the replacement, so no send writes in place into the new file.
    staged = _staged()
    stalled, first, resent = _stalled_and_resent(store, staged)
    real_copy = shutil.copyfileobj

    def fail_then_copy(*args: Any, **kwargs: Any) -> None:
        stalled.abort()
        real_copy(*args, **kwargs)

    monkeypatch.setattr(shutil, "copyfileobj", fail_then_copy)
    store.seal_file(staged, {1: first, 2: resent})
    _a_later_send(store, staged).abort()


def test_a_first_send_that_fails_as_the_file_is_replaced_leaves_no_way_in(
    store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failure races the replacement itself: its release of the claim waits for the
    # seal's lock, then finds the file replaced and keeps the claim.
    staged = _staged()
    stalled, first, resent = _stalled_and_resent(store, staged)
    real_replace = os.replace
    aborts: list[threading.Thread] = []

    def fail_then_replace(source: str | Path, target: str | Path) -> None:
        if Path(target).name.endswith("data") and not aborts:
            # The body gives up now, on its own thread; with the seal's lock held its
            # abort waits (released unlocked, the claim would be gone before this replace).
            aborts.append(threading.Thread(target=stalled.abort))
            aborts[0].start()
            aborts[0].join(timeout=0.2)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", fail_then_replace)
    store.seal_file(staged, {1: first, 2: resent})
    aborts[0].join(timeout=10)
    assert not aborts[0].is_alive()
    _a_later_send(store, staged).abort()


def test_a_stalled_first_send_that_finishes_after_the_seal_is_refused(
    store: LocalBlobStore,
) -> None:
    # It recorded itself against the old file's bytes and removed the re-send's record,
    # so the completion's retry naming the re-send failed, and one naming it sealed the
    # re-send's bytes under its ETag.
    staged = _staged()
    stalled, first, resent = _sealed_with_a_stalled_first_send(store, staged)
    stalled.write([b"A" * (PART - 10)], checksum=False)
    with pytest.raises(Conflict, match="completion replaced"):
        stalled.finish(None)
    stalled.abort()
    assert store.list_parts([staged])[0][2].etag == resent
    blob = store.seal_file(staged, {1: first, 2: resent})
    assert blob.sha256 == hashlib.sha256(b"1" * PART + b"B" * PART).hexdigest()


def test_listing_while_a_part_is_sent_again_never_loses_the_others(
    store: LocalBlobStore,
) -> None:
    # A finish removed the record it replaced under the listing's scan: the listing said
    # the file had no part at all ("part 2 was never received").
    staged = _staged()
    for number in (1, 2):
        _send(store, staged, number, b"x" * PART).finish(None)
    stop = threading.Event()

    def send_again() -> None:
        while not stop.is_set():
            _send(store, staged, 1, b"y" * PART).finish(None)

    sender = threading.Thread(target=send_again)
    sender.start()
    try:
        listings = [set(store.list_parts([staged])[0]) for _ in range(3000)]
    finally:
        stop.set()
        sender.join()
    assert all(parts == {1, 2} for parts in listings)


def test_a_part_finishing_after_its_staging_is_gone_is_refused_and_closes_once(
    store: LocalBlobStore,
) -> None:
    # Its finish closed the file and failed; the abort after it closed the same number
    # again, by then another file's.
    staged = _staged(1)
    writer = _send(store, staged, 1, b"1" * PART)
    store.discard_staging([staged])
    with pytest.raises(Conflict, match="completed or abandoned"):
        writer.finish(None)
    other = os.open(__file__, os.O_RDONLY)
    try:
        writer.abort()
        os.fstat(other)  # still open
    finally:
        os.close(other)


def test_a_file_whose_staging_directory_was_left_empty_is_staged_in_it(
    store: LocalBlobStore,
) -> None:
    # A version before made a file's directory, ``<position>/``, then its ``data``: killed
    # in between, it left the directory empty. Its parts go into that directory (where
    # listing and sealing look), not beside it, where nothing would ever find them.
    staged = _staged()
    own = store.root / "staging" / staged.upload_id / "0"
    own.mkdir(parents=True)
    etags = {n: _send(store, staged, n, bytes([n]) * PART).finish(None) for n in (1, 2)}
    assert sorted(p.name for p in own.parent.iterdir()) == ["0"]
    assert {n: p.etag for n, p in store.list_parts([staged])[0].items()} == etags
    blob = store.seal_file(staged, etags)
    assert blob.sha256 == hashlib.sha256(b"\1" * PART + b"\2" * PART).hexdigest()


@pytest.mark.parametrize("stray", ["².data", "٣.data", "03.data", "x.data"])
def test_names_no_position_of_the_service_would_make_are_left_alone(
    store: LocalBlobStore, stray: str
) -> None:
    staged = StagedFile("upload_abc", 3, PART, PART)
    etag = _send(store, staged, 1, b"3" * PART).finish(None)
    upload_dir = store.root / "staging" / staged.upload_id
    (upload_dir / stray).write_bytes(b"not ours")
    assert {n: p.etag for n, p in store.list_parts([staged])[0].items()} == {1: etag}
    store.discard_staging([staged])
    assert sorted(p.name for p in upload_dir.iterdir()) == [stray]
