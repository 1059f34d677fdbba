"""Chakra protobuf attributes (``AttributeProto``) and the ``GlobalMetadata`` that holds them.

An attribute is ``name = 1`` and one value of a ``oneof``: ``double_val = 3``, ``float_val = 5``,
``int32/int64/uint32/uint64_val = 7/9/11/13``, ``sint32/sint64_val = 15/17``, fixed-width ones
at 19-25, ``bool_val = 27``, ``string_val = 29`` (lists and bytes at the even numbers and 31+).
"""

from __future__ import annotations

import struct

from tracestore.inspect.model import AttributeValue
from tracestore.inspect.protowire import (
    FIXED32,
    FIXED64,
    LENGTH_DELIMITED,
    VARINT,
    Field,
    WireError,
    iter_fields,
    signed64,
    zigzag,
)

_UNSIGNED_VALUES = frozenset({7, 9, 11, 13, 27})  # int32/int64/uint32/uint64/bool _val
_ZIGZAG_VALUES = frozenset({15, 17})  # sint32/sint64 _val
_BOOL_VALUE, _STRING_VALUE = 27, 29
_FIXED_UNSIGNED = frozenset({19, 21})  # fixed32/fixed64 _val (23, 25: sfixed)


def is_global_metadata(buf: bytes, fields: list[Field]) -> bool:
    """Whether a message's fields are a GlobalMetadata: a printable ``version`` string (1)
    and attributes (2), each an AttributeProto with a printable name. A Node cannot pass:
    its ``id`` and ``type`` are varints and its name is no AttributeProto."""
    if not fields:
        return False
    for number, wire, a, b in fields:
        if wire != LENGTH_DELIMITED or number not in (1, 2):
            return False
        if number == 1 and not _printable(buf[a:b], empty=True):
            return False
        if number == 2 and attribute(buf, a, b) is None:
            return False
    return True


def _printable(text: bytes, *, empty: bool = False) -> bool:
    return (
        (empty or len(text) > 0)
        and len(text) <= 256
        and text.isascii()
        and (text.decode().isprintable())
    )


def attribute(buf: bytes, start: int, end: int) -> tuple[str, AttributeValue | None] | None:
    """``(name, scalar value or None for lists and bytes)`` of an AttributeProto, or None
    when the bytes are not one."""
    name: str | None = None
    value: AttributeValue | None = None
    try:
        for number, wire, a, b in iter_fields(buf, start, end):
            if number == 1 and wire == LENGTH_DELIMITED:
                if not _printable(buf[a:b]):
                    return None
                name = buf[a:b].decode()
            elif number == _BOOL_VALUE and wire == VARINT:
                value = bool(a)
            elif number in _UNSIGNED_VALUES and wire == VARINT:
                value = a if number in (11, 13) else signed64(a)
            elif number in _ZIGZAG_VALUES and wire == VARINT:
                value = zigzag(a)
            elif number == _STRING_VALUE and wire == LENGTH_DELIMITED:
                value = buf[a:b].decode("utf-8", "replace")
            elif number == 3 and wire == FIXED64:
                value = struct.unpack("<d", a.to_bytes(8, "little"))[0]
            elif number == 5 and wire == FIXED32:
                value = struct.unpack("<f", a.to_bytes(4, "little"))[0]
            elif number in _FIXED_UNSIGNED and wire in (FIXED32, FIXED64):
                value = a
            elif number in (23, 25) and wire in (FIXED32, FIXED64):
                bits = 32 if wire == FIXED32 else 64
                value = a - (1 << bits) if a >= 1 << (bits - 1) else a
    except WireError:
        return None
    return None if name is None else (name, value)


def find_string_attribute(buf: bytes, start: int, end: int, key: bytes) -> str | None:
    """The ``string_val`` of the attribute whose encoded name is ``key``, else None (found
    as ``find_int_attribute`` finds its)."""
    hit = buf.find(key, start, end)
    while hit >= 0:
        if hit - 2 >= start and buf[hit - 2] == 0x52 and hit + buf[hit - 1] <= end:
            for number, wire, a, b in iter_fields(buf, hit + len(key), hit + buf[hit - 1]):
                if number == _STRING_VALUE and wire == LENGTH_DELIMITED:
                    return buf[a:b].decode("utf-8", "replace")
            return None
        hit = buf.find(key, hit + 1, end)
    return None


def find_int_attribute(buf: bytes, start: int, end: int, key: bytes) -> int | None:
    """The integer value of the attribute whose encoded name is ``key``, else None.

    Found with ``bytes.find`` rather than by decoding every field, which costs more than
    the rest of the scan; a hit counts only where an ``attr`` field (tag 0x52, one-byte
    length) starts right before it, so a string that happens to hold the name does not.
    """
    hit = buf.find(key, start, end)
    while hit >= 0:
        if hit - 2 >= start and buf[hit - 2] == 0x52 and hit + buf[hit - 1] <= end:
            return _attribute_int(buf, hit + len(key), hit + buf[hit - 1])
        hit = buf.find(key, hit + 1, end)
    return None


def _attribute_int(buf: bytes, start: int, end: int) -> int:
    """The integer value of an attribute whose name ends at ``start``."""
    for number, wire, value, _ in iter_fields(buf, start, end):
        if wire == VARINT and number in _UNSIGNED_VALUES:
            return signed64(value)
        if wire == VARINT and number in _ZIGZAG_VALUES:
            return zigzag(value)
    return 0
