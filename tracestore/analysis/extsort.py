"""Sorting many fixed-width integer records in bounded memory.

A ``RecordSort`` holds records as columns of packed 64-bit integers (``array('q')``), never as
a Python object per record. When the columns reach their share of the memory bound, they
are sorted (stably, by the key fields) and written to a temporary file as a run; ``rows()``
then merges the runs with ``heapq.merge``, reading each in blocks. Records with equal keys
come out in the order they were added, so the answer does not depend on where the runs were
cut. Sorting a run makes a few objects per record while it sorts (the order list and its
keys): the bound counts them too (``SORT_BYTES_PER_RECORD``).
"""

from __future__ import annotations

import heapq
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import IO

ITEM = 8  # bytes of one field
# What sorting a run costs per record besides its fields: a list slot and an int of the order,
# a list slot and an int of the keys, and one more column while a column is permuted.
SORT_BYTES_PER_RECORD = 96
MIN_RUN = 1024


@dataclass(frozen=True)
class _Run:
    offset: int  # of its first column in the spill file
    count: int


class RecordSort:
    """Records of ``width`` int64 fields, sorted by their first ``key_width`` fields.

    ``memory`` is the most this sort's records (and the objects sorting a run makes) may
    take; past it, sorted runs go to a temporary file in ``directory``.
    """

    def __init__(
        self, width: int, key_width: int, memory: int, directory: str | None = None
    ) -> None:
        if not 1 <= key_width <= width:
            raise ValueError("key_width must be between 1 and width")
        self.width = width
        self.key_width = key_width
        self.run_capacity = max(MIN_RUN, memory // (width * ITEM + SORT_BYTES_PER_RECORD))
        self._directory = directory
        self._columns = [array("q") for _ in range(width)]
        self._runs: list[_Run] = []
        self._file: IO[bytes] | None = None
        self._written = 0
        self.count = 0

    @property
    def spilled(self) -> bool:
        """True once a run went to disk."""
        return bool(self._runs)

    def add(self, record: Sequence[int]) -> None:
        """Add one record (``width`` ints)."""
        for column, value in zip(self._columns, record, strict=True):
            column.append(value)
        self.count += 1
        if len(self._columns[0]) >= self.run_capacity:
            self._spill()

    def add_columns(self, columns: Sequence[Iterable[int]]) -> None:
        """Add records given as ``width`` columns of equal length (faster than ``add``)."""
        before = len(self._columns[0])
        for column, values in zip(self._columns, columns, strict=True):
            column.extend(values)
        added = len(self._columns[0]) - before
        if any(len(column) != before + added for column in self._columns):
            raise ValueError("columns of unequal length")
        self.count += added
        if len(self._columns[0]) >= self.run_capacity:
            self._spill()

    def rows(self) -> Iterator[tuple[int, ...]]:
        """Every record once, in key order (ties in the order added). Call once."""
        columns = self._sorted_columns()
        if not self._runs:
            return zip(*columns, strict=True)
        if columns[0]:
            self._write_run(columns)
        del columns
        block = max(MIN_RUN, self.run_capacity // max(1, len(self._runs)))
        readers = [self._read_run(run, block) for run in self._runs]
        return heapq.merge(*readers, key=itemgetter(*range(self.key_width)))

    def close(self) -> None:
        """Remove the temporary file, if any."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RecordSort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sorted_columns(self) -> list[array[int]]:
        columns, self._columns = self._columns, [array("q") for _ in range(self.width)]
        count = len(columns[0])
        order = list(range(count))
        for field in reversed(range(self.key_width)):  # stable sorts, least significant first
            order.sort(key=columns[field].__getitem__)
        for index, column in enumerate(columns):
            columns[index] = array("q", map(column.__getitem__, order))
            del column
        return columns

    def _spill(self) -> None:
        self._write_run(self._sorted_columns())

    def _write_run(self, columns: list[array[int]]) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self._directory)  # noqa: SIM115 - closed by close()
        self._runs.append(_Run(self._written, len(columns[0])))
        for column in columns:
            column.tofile(self._file)
            self._written += len(column) * ITEM
        self._file.flush()

    def _read_run(self, run: _Run, block: int) -> Iterator[tuple[int, ...]]:
        assert self._file is not None
        fd = self._file.fileno()
        done = 0
        while done < run.count:
            size = min(block, run.count - done)
            columns = []
            for field in range(self.width):
                start = run.offset + (field * run.count + done) * ITEM
                column = array("q")
                column.frombytes(os.pread(fd, size * ITEM, start))
                columns.append(column)
            yield from zip(*columns, strict=True)
            done += size
