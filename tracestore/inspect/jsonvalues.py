"""JSON documents read one object at a time: arrays of objects, and concatenated objects.

``json.JSONDecoder.raw_decode`` decodes each object from a text window that is refilled
chunk by chunk, so memory is bounded by the largest single object, never the file. Used for
Chakra's JSON forms, whose nodes must be decoded whole (a node's type and its attributes
are in no fixed order).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

from tracestore.inspect.jsonscan import CHUNK_SIZE, MAX_OBJECT
from tracestore.inspect.model import Draft, InspectionError
from tracestore.inspect.streams import BinaryReader, read_chunk

_BLANK = re.compile(r"[\ufeff \t\r\n]*")


def iter_values(
    stream: BinaryReader, draft: Draft, *, array_keys: tuple[str, ...] = ()
) -> Iterator[Any]:
    """The JSON objects of a stream, one at a time, in bounded memory: the elements of a
    top-level array, of the array under one of ``array_keys`` when that is the first member
    of a top-level object, or else each of a run of concatenated objects (``{...}{...}``, as
    protobuf-to-JSON dumpers write). Raises ``InspectionError`` for a truncated or malformed
    stream, after yielding what came before."""
    reader = _TextWindow(stream, draft)
    reader.skip_blank()
    first = reader.peek()
    if first == "":
        return
    wrapped = False
    if first == "{" and array_keys:
        wrapped = reader.open_wrapped_array(array_keys)
    if first == "[" or wrapped:
        if first == "[":
            reader.pos += 1
        yield from reader.array_elements()
        if wrapped:
            reader.expect_wrapper_close()
        return
    while True:
        reader.skip_blank()
        if reader.peek() == "":
            return
        yield reader.value()


class _TextWindow:
    """Decoded text of a stream from ``pos`` on, refilled chunk by chunk."""

    def __init__(self, stream: BinaryReader, draft: Draft) -> None:
        self._stream = stream
        self._draft = draft
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._json = json.JSONDecoder()
        self._failure: Exception | None = None
        self._eof = False
        self.buf = ""
        self.pos = 0
        self.offset = 0  # characters dropped before buf

    def more(self) -> bool:
        """Read the next chunk (dropping what was consumed); False at the end."""
        if self._failure is not None:
            raise self._failure
        if self._eof:
            return False
        data, self._failure = read_chunk(self._stream, CHUNK_SIZE)
        self._draft.bytes_scanned += len(data)
        self._eof = self._failure is None and len(data) < CHUNK_SIZE
        text = self._decoder.decode(data, final=self._eof)
        self.offset += self.pos
        self.buf, self.pos = self.buf[self.pos :] + text, 0
        return bool(text) or not self._eof or self._failure is not None

    def skip_blank(self) -> None:
        """Move past whitespace (and a byte-order mark), reading on as needed."""
        while True:
            blank = _BLANK.match(self.buf, self.pos)
            self.pos = blank.end() if blank else self.pos
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self) -> str:
        """The next character, ``""`` at the end."""
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def value(self) -> Any:
        """Decode the object or array at ``pos`` (reading on until it is whole)."""
        if self.peek() not in ("{", "["):
            raise InspectionError(
                f"malformed: expected an object at character {self.offset + self.pos}"
            )
        while True:
            try:
                value, end = self._json.raw_decode(self.buf, self.pos)
            except ValueError as exc:
                if not isinstance(exc, json.JSONDecodeError):  # past int's digit limit
                    raise InspectionError(
                        f"malformed JSON at character {self.offset + self.pos}: {exc}"
                    ) from None
                if len(self.buf) - self.pos > MAX_OBJECT:
                    raise InspectionError(
                        f"malformed: an object at character {self.offset + self.pos} is "
                        f"longer than {MAX_OBJECT} bytes"
                    ) from None
                if self.more():
                    continue
                cut = exc.pos >= len(self.buf) - 1 or exc.msg.startswith("Unterminated")
                raise InspectionError(
                    f"truncated: the value at character {self.offset + self.pos} is cut off "
                    "by the end of the data"
                    if cut
                    else f"malformed JSON at character {self.offset + exc.pos}: {exc.msg}"
                ) from None
            self.pos = end
            return value

    def open_wrapped_array(self, keys: tuple[str, ...]) -> bool:
        """Move into ``{"<key>": [`` when the object at ``pos`` starts so."""
        while len(self.buf) - self.pos < 4096 and self.more():
            pass
        match = re.compile(r'\{\s*"(?:' + "|".join(map(re.escape, keys)) + r')"\s*:\s*\[').match(
            self.buf, self.pos
        )
        if match is None:
            return False
        self.pos = match.end()
        return True

    def array_elements(self) -> Iterator[Any]:
        """The elements up to the closing ``]`` (``pos`` just inside the ``[``)."""
        first = True
        while True:
            self.skip_blank()
            char = self.peek()
            if char == "]":
                self.pos += 1
                return
            if char == "":
                raise InspectionError(
                    f"truncated: the array ends after character {self.offset + self.pos} "
                    "before its ]"
                )
            if not first:
                if char != ",":
                    raise InspectionError(
                        f"malformed: expected , or ] at character {self.offset + self.pos}"
                    )
                self.pos += 1
                self.skip_blank()
            first = False
            yield self.value()

    def expect_wrapper_close(self) -> None:
        """Read to the end; the document must end with the wrapper's ``}``."""
        last = ""
        while True:
            rest = self.buf[self.pos :].rstrip()
            last = rest[-1:] or last
            self.pos = len(self.buf)
            if not self.more():
                break
        if last != "}":
            raise InspectionError("truncated: the JSON document ends before it is closed")
