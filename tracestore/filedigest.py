"""The SHA-256 of a file whose parts move in any order and in parallel, hashed as they move.

A file's SHA-256 must see its bytes in order, but an upload sends (and the service
receives) several parts of a file at once, in any order. ``FileDigest`` keeps a chain: the
digest of the file's first parts. The transfer of the part right after the chain's end
hashes its bytes as they pass (after reading back, once, any of its bytes that passed
before it became the chain's next part); a part that finishes out of turn is hashed later
by reading it back, when the chain reaches it. In the usual order (each file's parts in
sequence, files in parallel) every byte is hashed once as it passes and nothing is read
back.

A digest can also start after a prefix of whole parts hashed before the upload began
(``adopt``, from ``tracestore.readahead``): their transfers pass without hashing, and
``skip`` counts the bytes of a part the kernel sends unread.

A read-back that fails (``OSError``) breaks the chain: ``hexdigest`` then answers None
and the caller hashes the whole file its own way. Used by the client (hashing the file it
sends) and by the embedded blob store (hashing the parts it receives). Standard library only.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping

_READ_AHEAD = object()
"""The tag of a part whose bytes were hashed from the file before any transfer of it."""

ReadBack = Callable[[int, int], Iterable[bytes | memoryview]]
"""``read_back(offset, length)``: the bytes of the file at ``offset``, in chunks (never
asked for zero bytes)."""


class FileDigest:
    """The running SHA-256 of one file of ``size`` bytes cut into ``part_size`` parts."""

    def __init__(self, size: int, part_size: int, read_back: ReadBack) -> None:
        if part_size <= 0:
            raise ValueError("part_size must be positive")
        self.size = size
        self.part_size = part_size
        self.part_count = max(1, -(-size // part_size))
        self._read_back = read_back
        self._lock = threading.Lock()
        self._sha = hashlib.sha256()
        self._next = 1  # the first part not in the chain
        self._tags: list[Hashable] = []  # per chained part: the tag its transfer finished with
        self._owner: object | None = None  # who is extending the chain right now
        self._finished: dict[int, Hashable] = {}  # parts done out of turn, waiting
        self._broken = False

    def part_length(self, number: int) -> int:
        return min(self.part_size, self.size - (number - 1) * self.part_size)

    def transfer(self, number: int) -> PartTransfer:
        """The hashing side of one attempt to move part ``number``."""
        if not 1 <= number <= self.part_count:
            raise ValueError(f"part {number} out of range 1..{self.part_count}")
        return PartTransfer(self, number)

    def adopt(self, parts: int, sha: hashlib._Hash) -> None:
        """Start the chain after the file's first ``parts`` parts, ``sha`` being the SHA-256
        state after them as read from the file before any of its transfers began.

        Those parts' bytes were hashed from the file, not as any transfer moved them, so
        ``hexdigest(tags)`` does not tie them to a tag: the caller adopts only what was read
        from the file as it still is (``ReadAhead.prefix``: same inode, size and times), as
        the kernel sends it, and the service verifies the declared hash of what it got."""
        with self._lock:
            if self._next != 1 or self._owner is not None or self._finished or self._broken:
                raise ValueError("a digest adopts a prefix only before its transfers begin")
            if not 1 <= parts <= self.part_count:
                raise ValueError(f"{parts} parts out of range 1..{self.part_count}")
            self._sha = sha.copy()
            self._tags = [_READ_AHEAD] * parts
            self._next = parts + 1

    def hexdigest(self, tags: Mapping[int, Hashable] | None = None) -> str | None:
        """The file's SHA-256 once every part is chained (and, when ``tags`` are given, each
        part was chained by the transfer that finished with that tag, or was adopted);
        otherwise None."""
        with self._lock:
            if self._broken or self._next <= self.part_count or self._owner is not None:
                return None
            if tags is not None and any(
                mine is not _READ_AHEAD and tags.get(number) != mine
                for number, mine in enumerate(self._tags, start=1)
            ):
                return None
            return self._sha.hexdigest()

    # --- the chain ---

    def _claim(self, owner: object, number: int) -> hashlib._Hash | None:
        with self._lock:
            if self._broken or self._next != number or self._owner is not None:
                return None
            self._owner = owner
            return self._sha.copy()

    def _extend(self, owner: object, sha: hashlib._Hash, tag: Hashable) -> None:
        with self._lock:
            if self._owner is not owner:
                return  # the chain broke meanwhile
            self._sha = sha
            self._tags.append(tag)
            self._next += 1
            self._owner = None
        self._catch_up()

    def _break(self) -> None:
        with self._lock:
            self._broken = True
            self._owner = None
            self._finished.clear()

    def _release(self, owner: object) -> None:
        with self._lock:
            if self._owner is owner:
                self._owner = None

    def _finished_out_of_turn(self, number: int, tag: Hashable) -> None:
        with self._lock:
            if number >= self._next:
                self._finished[number] = tag
        self._catch_up()

    def _catch_up(self) -> None:
        """Read back and chain every finished part the chain has reached."""
        token = object()
        while True:
            with self._lock:
                number = self._next
                if self._broken or self._owner is not None or number not in self._finished:
                    return
                tag = self._finished.pop(number)
                self._owner = token
                sha = self._sha.copy()
            try:
                offset, length = (number - 1) * self.part_size, self.part_length(number)
                for chunk in self._read_back(offset, length) if length else ():
                    sha.update(chunk)
            except OSError:
                self._break()
                return
            except BaseException:
                with self._lock:
                    self._owner = None
                raise
            with self._lock:
                self._sha = sha
                self._tags.append(tag)
                self._next += 1
                self._owner = None


class PartTransfer:
    """Feed it each chunk of the part, in order, as it moves; then ``finish`` or ``abort``."""

    def __init__(self, digest: FileDigest, number: int) -> None:
        self._digest = digest
        self.number = number
        self.offset = (number - 1) * digest.part_size
        self.seen = 0
        self._sha: hashlib._Hash | None = None
        self._closed = False

    @property
    def hashing(self) -> bool:
        """Whether this transfer is extending the chain as its bytes pass."""
        return self._sha is not None

    @property
    def chained(self) -> bool:
        """Whether the part is in the file's digest already (adopted): its bytes need not be
        read for the hash, and ``skip`` counts them."""
        return self.number < self._digest._next

    def skip(self, length: int) -> None:
        """``length`` bytes of an adopted part passed without being read here."""
        if not self.chained:
            raise ValueError(f"part {self.number} is not in the digest: its bytes must pass")
        self.seen += length

    def update(self, chunk: bytes | memoryview) -> None:
        if self._sha is None and self._digest._next == self.number:
            self._take_turn()
        if self._sha is not None:
            self._sha.update(chunk)
        self.seen += len(chunk)

    def _take_turn(self) -> None:
        sha = self._digest._claim(self, self.number)
        if sha is None:
            return
        try:
            # The bytes that passed before this part's turn came: read them back once.
            if self.seen:
                for chunk in self._digest._read_back(self.offset, self.seen):
                    sha.update(chunk)
        except OSError:
            self._digest._break()
            return
        except BaseException:
            self._digest._release(self)
            raise
        self._sha = sha

    def finish(self, tag: Hashable = None) -> None:
        """The part moved whole; ``tag`` names this transfer (e.g. its ETag)."""
        if self._closed:
            return
        if self.seen != self._digest.part_length(self.number):
            self.abort()
            raise ValueError(
                f"part {self.number} passed {self.seen} bytes, not its "
                f"{self._digest.part_length(self.number)}"
            )
        self._closed = True
        if self._sha is not None:
            self._digest._extend(self, self._sha, tag)
        else:
            self._digest._finished_out_of_turn(self.number, tag)

    def abort(self) -> None:
        """The part did not move whole; nothing it saw counts."""
        if not self._closed:
            self._closed = True
            self._digest._release(self)
        self._sha = None
