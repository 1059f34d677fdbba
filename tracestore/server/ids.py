"""Identifiers: a prefix and 27 base62 characters, sortable by creation time (KSUID-like);
request ids (``new_request_id``)."""

from __future__ import annotations

import os
import random
import secrets
import time
from datetime import UTC, datetime

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_EPOCH = 1_400_000_000  # KSUID's epoch, so 32-bit seconds last until 2150
_LENGTH = 27


def new_id(prefix: str, *, now: float | None = None) -> str:
    """``<prefix>_<27 chars>``: 4 bytes of seconds since the epoch, then 16 random bytes."""
    seconds = int(now if now is not None else time.time()) - _EPOCH
    value = int.from_bytes(seconds.to_bytes(4, "big") + secrets.token_bytes(16), "big")
    chars = []
    for _ in range(_LENGTH):
        value, digit = divmod(value, 62)
        chars.append(_ALPHABET[digit])
    return f"{prefix}_{''.join(reversed(chars))}"


# Request ids need to be unique, not unguessable: drawn from a PRNG seeded from the OS (a
# token_hex per request was a getrandom(2) call each), reseeded in a forked child.
_request_ids = random.Random()
os.register_at_fork(after_in_child=_request_ids.seed)


def new_request_id() -> str:
    """``req_`` and 24 hex digits: a request's id (``X-Request-Id``, every error envelope)."""
    return f"req_{_request_ids.getrandbits(96):024x}"


def created_at(identifier: str) -> datetime | None:
    """When ``new_id`` made ``identifier`` (to the second), or None when it is not one."""
    _, _, text = identifier.rpartition("_")
    if len(text) != _LENGTH or any(ch not in _ALPHABET for ch in text):
        return None
    value = 0
    for ch in text:
        value = value * 62 + _ALPHABET.index(ch)
    if value >= 1 << 160:
        return None
    return datetime.fromtimestamp((value >> 128) + _EPOCH, UTC)
