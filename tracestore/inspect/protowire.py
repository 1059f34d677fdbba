"""The protobuf wire format, as little of it as the Chakra reader needs (no protobuf import).

A message is a sequence of fields, each a varint tag ``field_number << 3 | wire_type``
followed by a varint (type 0), 8 bytes (type 1), a varint length and that many bytes
(type 2) or 4 bytes (type 5). Types 3 and 4 (groups) are obsolete and refused here.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, next position)`` of the varint at ``buf[pos]``; IndexError if it runs off."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def zigzag(value: int) -> int:
    """Decode a ``sint32``/``sint64`` value."""
    return (value >> 1) ^ -(value & 1)


def signed64(value: int) -> int:
    """A varint read as ``int64`` (negative numbers are ten-byte two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


Field = tuple[int, int, int, int]  # field number, wire type, value or start, end (type 2)


def iter_fields(buf: bytes, start: int, end: int) -> Iterator[Field]:
    """The fields of the message in ``buf[start:end]``.

    Yields ``(number, wire_type, value, 0)`` for scalar fields (fixed-width ones as unsigned
    little-endian integers) and ``(number, 2, payload_start, payload_end)`` for
    length-delimited ones. Raises ``WireError`` for malformed bytes.
    """
    pos = start
    try:
        while pos < end:
            tag, pos = read_varint(buf, pos)
            number, wire = tag >> 3, tag & 7
            if number == 0:
                raise WireError("field number 0")
            if wire == VARINT:
                value, pos = read_varint(buf, pos)
                if pos > end:
                    raise WireError("varint runs past its message")
                yield number, wire, value, 0
            elif wire == LENGTH_DELIMITED:
                size, pos = read_varint(buf, pos)
                if pos + size > end:
                    raise WireError("length-delimited field runs past its message")
                yield number, wire, pos, pos + size
                pos += size
            elif wire in (FIXED64, FIXED32):
                width = 8 if wire == FIXED64 else 4
                if pos + width > end:
                    raise WireError("fixed-width field runs past its message")
                yield number, wire, int.from_bytes(buf[pos : pos + width], "little"), 0
                pos += width
            else:
                raise WireError(f"unsupported wire type {wire}")
    except IndexError:
        raise WireError("message ends inside a field") from None
    if pos != end:
        raise WireError("field runs past its message")
