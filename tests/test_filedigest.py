"""FileDigest: a file's SHA-256 from parts that move in any order, in parallel, with retries."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator

import pytest

from tracestore.filedigest import FileDigest


class Source:
    """A file's bytes, counting what is read back."""

    def __init__(self, data: bytes, *, fail: bool = False) -> None:
        self.data = data
        self.read_back = 0
        self.calls = 0
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, offset: int, length: int) -> Iterator[memoryview]:
        if self.fail:
            raise OSError("disk gone")
        with self.lock:
            self.read_back += length
            self.calls += 1
        view = memoryview(self.data)
        for start in range(offset, offset + length, 7):
            yield view[start : min(start + 7, offset + length)]


def send(digest: FileDigest, data: bytes, number: int, rng: random.Random) -> None:
    """One transfer of a part in random-sized chunks."""
    transfer = digest.transfer(number)
    offset = (number - 1) * digest.part_size
    end = offset + digest.part_length(number)
    while offset < end:
        step = rng.randint(1, 9)
        transfer.update(data[offset : min(offset + step, end)])
        offset += step
    transfer.finish(f"etag-{number}")


def test_parts_in_order_are_hashed_as_they_pass_and_never_read_back() -> None:
    data = random.Random(1).randbytes(1000)
    source = Source(data)
    digest = FileDigest(len(data), 64, source)
    for number in range(1, digest.part_count + 1):
        send(digest, data, number, random.Random(number))
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert source.read_back == source.calls == 0


def test_parts_in_reverse_order_are_read_back_when_the_chain_reaches_them() -> None:
    data = random.Random(2).randbytes(1000)
    source = Source(data)
    digest = FileDigest(len(data), 100, source)
    for number in reversed(range(1, 11)):
        send(digest, data, number, random.Random(number))
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert source.read_back == 900  # all but part 1, which was the chain's next as it passed


def test_a_part_that_becomes_next_mid_transfer_reads_back_only_what_passed_before() -> None:
    data = bytes(range(200))
    source = Source(data)
    digest = FileDigest(200, 100, source)
    second = digest.transfer(2)
    second.update(data[100:130])
    assert not second.hashing
    send(digest, data, 1, random.Random(0))
    second.update(data[130:200])
    assert second.hashing
    second.finish("b")
    assert digest.hexdigest({1: "etag-1", 2: "b"}) == hashlib.sha256(data).hexdigest()
    assert source.read_back == 30


@pytest.mark.parametrize("seed", range(12))
def test_parallel_transfers_in_any_order_with_failed_attempts(seed: int) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randint(1, 3000))
    source = Source(data)
    digest = FileDigest(len(data), rng.randint(1, 400), source)
    numbers = list(range(1, digest.part_count + 1))
    rng.shuffle(numbers)
    errors: list[BaseException] = []

    def worker(mine: list[int], seed: int) -> None:
        local = random.Random(seed)
        try:
            for number in mine:
                if local.random() < 0.3:  # a failed attempt first
                    failed = digest.transfer(number)
                    offset = (number - 1) * digest.part_size
                    failed.update(data[offset : offset + local.randint(0, 5)])
                    failed.abort()
                send(digest, data, number, local)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(numbers[i::4], seed * 10 + i)) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    tags = {n: f"etag-{n}" for n in range(1, digest.part_count + 1)}
    assert digest.hexdigest(tags) == hashlib.sha256(data).hexdigest()


def test_an_unfinished_chain_or_other_tags_give_no_digest() -> None:
    data = b"x" * 300
    digest = FileDigest(300, 100, Source(data))
    send(digest, data, 1, random.Random(0))
    send(digest, data, 3, random.Random(0))
    assert digest.hexdigest() is None
    send(digest, data, 2, random.Random(0))
    assert digest.hexdigest({1: "etag-1", 2: "etag-2", 3: "etag-3"}) is not None
    assert digest.hexdigest({1: "etag-1", 2: "other", 3: "etag-3"}) is None


def test_an_empty_file_has_the_empty_digest_and_reads_nothing_back() -> None:
    source = Source(b"")
    digest = FileDigest(0, 100, source)
    digest.transfer(1).finish()
    assert digest.hexdigest() == hashlib.sha256(b"").hexdigest()
    assert source.calls == 0


def test_a_failed_read_back_breaks_the_chain_without_failing_the_transfer() -> None:
    data = b"y" * 200
    digest = FileDigest(200, 100, Source(data, fail=True))
    send(digest, data, 2, random.Random(0))
    send(digest, data, 1, random.Random(0))  # reaching part 2 needs a read-back: it fails
    assert digest.hexdigest() is None


def test_finishing_a_part_with_the_wrong_byte_count_is_refused() -> None:
    digest = FileDigest(200, 100, Source(b"z" * 200))
    transfer = digest.transfer(1)
    transfer.update(b"z" * 99)
    with pytest.raises(ValueError, match="passed 99 bytes, not its 100"):
        transfer.finish()
    with pytest.raises(ValueError, match="out of range"):
        digest.transfer(3)


def test_an_adopted_prefix_of_parts_passes_unread_and_the_rest_is_hashed_as_it_goes() -> None:
    data = random.Random(7).randbytes(25)
    source = Source(data)
    digest = FileDigest(len(data), 10, source)
    prefix = hashlib.sha256(data[:20])  # parts 1 and 2, hashed before the upload
    digest.adopt(2, prefix)
    prefix.update(b"not the file")  # the digest keeps its own copy

    first = digest.transfer(1)
    assert first.chained
    first.skip(10)
    first.finish("etag-1")
    last = digest.transfer(3)
    assert not last.chained
    last.update(data[20:])
    last.finish("etag-3")

    assert source.read_back == 0
    # The adopted parts take whatever their transfers finished with; the rest are checked.
    assert digest.hexdigest({1: "other", 3: "etag-3"}) == hashlib.sha256(data).hexdigest()
    assert digest.hexdigest({1: "other", 3: "a retry's"}) is None


def test_a_whole_file_adopted_needs_no_transfer_to_hash() -> None:
    data = b"0123456789abc"
    digest = FileDigest(len(data), 5, Source(data))
    digest.adopt(3, hashlib.sha256(data))
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_prefix_is_adopted_only_before_transfers_and_only_parts_in_it_may_skip() -> None:
    data = bytes(30)
    digest = FileDigest(len(data), 10, Source(data))
    with pytest.raises(ValueError, match="out of range"):
        digest.adopt(4, hashlib.sha256())
    with pytest.raises(ValueError, match="not in the digest"):
        digest.transfer(1).skip(10)
    transfer = digest.transfer(1)
    transfer.update(data[:3])  # the chain is now this transfer's
    with pytest.raises(ValueError, match="before its transfers begin"):
        digest.adopt(1, hashlib.sha256(data[:10]))
    transfer.update(data[3:10])
    transfer.finish("e1")
    with pytest.raises(ValueError, match="before its transfers begin"):
        digest.adopt(2, hashlib.sha256(data[:20]))
