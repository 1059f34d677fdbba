"""JSON that keeps what the sender wrote.

workloadMetadata is stored and returned *as given*: key order and numbers as written
(``2.0`` stays ``2.0``, ``1e3`` stays ``1e3``, ``1e400`` does not become ``Infinity``).
``loads`` parses non-integer numbers into ``RawNumber`` (a float that remembers its text)
and ``dumps`` writes compact JSON that puts that text back.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any


class RawNumber(float):
    """A JSON number that is not an integer, with the text it was written as."""

    text: str

    def __new__(cls, text: str) -> RawNumber:
        value = float(text)
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text


class RawJSON(str):
    """A fragment of JSON text to be embedded verbatim by ``dumps``."""


class NestedTooDeeply(ValueError):
    """JSON nested deeper than the parser's recursion allows (``loads``)."""


def loads(text: str | bytes) -> Any:
    """Parse JSON, keeping the text of every non-integer number (see ``RawNumber``).
    Raises ``ValueError`` for text that is not JSON (``NestedTooDeeply`` for nesting the
    parser cannot follow)."""
    try:
        return json.loads(text, parse_float=RawNumber, parse_constant=_refuse_constant)
    except RecursionError:
        raise NestedTooDeeply("it is nested too deeply") from None


def nesting_depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar is 0, ``[[]]`` is 2); without
    recursion, so any depth ``loads`` returns can be measured."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((member, depth + 1) for member in item)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def dumps(value: Any) -> str:
    """Compact JSON (``,`` and ``:`` separators, non-ASCII kept) with numbers as written."""
    if _plain(value):
        # Nothing whose text this writer must keep: pydantic-core's serializer writes the
        # same (``compact``), ten times faster (an upload's 1,000 files: 15 ms, 1.4 ms).
        return compact(value)
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


_PLAIN_LEAVES = (str, bool, type(None))


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of exactly strings, integers of at most 64 bits, booleans,
    None, lists, tuples and string-keyed dicts (no float, so no ``RawNumber``; no
    ``RawJSON``; no subclass of any of these), without recursion. A larger integer is
    written by ``int`` itself, which refuses more digits than its limit (ValueError, which
    ``value_text`` words)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif kind is int:
            if item.bit_length() > 64:
                return False
        elif kind not in _PLAIN_LEAVES:
            return False
    return True


def compact(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` of a value made of
    strings, integers, booleans, None, lists and string-keyed dicts, written by
    pydantic-core's serializer in a fourth of the time (a list page's 45 us, 12). No
    floats: the two write some differently (``1e-07``, ``1e-7``), and a ``RawNumber``'s
    text would be lost. A string the serializer refuses (a lone surrogate) is json's to
    write (tests/test_jsontext.py holds the two equal)."""
    # Imported here: the command line imports this module at its start, where pydantic-core
    # would cost ~15 ms (bench/cli_start.py); the server has it loaded already.
    from pydantic_core import PydanticSerializationError, to_json

    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, RawJSON):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is None or isinstance(value, bool):
        out.append(json.dumps(value))
    elif isinstance(value, RawNumber):
        out.append(value.text)
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} cannot be written as JSON")
        out.append(float.__repr__(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append(json.dumps(str(key), ensure_ascii=False))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")


def plain(value: Any) -> Any:
    """``value`` as plain JSON values (``RawNumber`` becomes a float), for a queryable column.

    A number beyond the float range (``1e400``) becomes null there: databases refuse
    ``Infinity`` in JSON. A U+0000 in a string or a member name becomes U+FFFD there:
    PostgreSQL's jsonb cannot hold it. The text as given keeps both.
    """
    if value is None:
        return None
    text = _ESCAPED_NUL.sub(r"\1\\ufffd", dumps(value))
    return json.loads(text, parse_float=_finite_or_none, parse_constant=lambda _: None)


# A ``\u0000`` escape in JSON text: after an even run of backslashes (``\\u0000`` is a
# backslash and the letters u0000, not a NUL).
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _finite_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text`` (``U+D800``), or None when it is Unicode text.
    JSON's ``"\\ud800"`` escape decodes to one; no UTF-8 text, database or JSON reader of
    the answers can hold it."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return f"U+{ord(text[exc.start]):04X}"
    return None


def value_text(value: Any) -> str:
    """How a value reads in an error message: its JSON text (``"8"``, ``2.0``, ``true``)."""
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return repr(value)
