"""Turning pydantic's validation errors into one message that names the member at fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from tracestore.errors import ValidationError, shortened
from tracestore.jsontext import NestedTooDeeply, loads, nesting_depth, value_text
from tracestore.schemas import NOT_UNICODE, lone_surrogate

Model = TypeVar("Model", bound=BaseModel)

# How deep arrays and objects may nest in a JSON body (workloadMetadata sits at depth 2).
MAX_BODY_DEPTH = 64
_TOO_DEEP = f"Request body nests arrays and objects more than {MAX_BODY_DEPTH} levels deep"

_LOCATION_ROOTS = {"body", "query", "path", "header"}


def location_text(loc: Sequence[int | str]) -> str:
    """``("body", "files", 2, "name")`` → ``files[2].name``."""
    parts = list(loc)
    if parts and parts[0] in _LOCATION_ROOTS and len(parts) > 1:
        parts = parts[1:]
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "request"


def error_message(error: dict[str, Any]) -> str:
    where = location_text(error.get("loc", ()))
    message = str(error.get("msg", "is invalid"))
    if message.startswith("Value error, "):
        return message.removeprefix("Value error, ")
    if error.get("type") == "missing":
        return f"{where} is required"
    if error.get("type") in (NOT_UNICODE, "string_unicode"):  # the value cannot be shown
        # pydantic's own string_unicode comes first where a constraint counts characters.
        given = error.get("input")
        surrogate = lone_surrogate(given) if isinstance(given, str) else None
        return f"{where} holds a lone surrogate ({surrogate}), which is not Unicode text"
    if error.get("type") == "json_invalid":
        return f"Request body is not valid JSON: {error.get('ctx', {}).get('error', message)}"
    shown = ""
    if "input" in error and error.get("type") not in ("missing",):
        shown = f", got {shortened(value_text(error['input']))}"
    return f"{where}: {message[0].lower() + message[1:]}{shown}"


def pydantic_message(exc: PydanticValidationError | Sequence[Any]) -> str:
    """The first error, worded for a person; ``(+N more)`` when there are others."""
    errors = list(exc.errors() if isinstance(exc, PydanticValidationError) else exc)
    if not errors:
        return "The request is invalid"
    first = error_message(dict(errors[0]))
    return first if len(errors) == 1 else f"{first} (+{len(errors) - 1} more)"


def parse_json_body(body: bytes, model: type[Model]) -> Model:
    """A JSON object body read into ``model``, numbers kept as written (``jsontext``);
    ValidationError (400) naming what is wrong otherwise."""
    try:
        data = loads(body)
    except NestedTooDeeply:
        raise ValidationError(_TOO_DEEP) from None
    except ValueError as exc:
        raise ValidationError(f"Request body is not valid JSON: {exc}") from None
    # Nesting deeper than any real body costs recursion in every later step (500s).
    if nesting_depth(data) > MAX_BODY_DEPTH:
        raise ValidationError(_TOO_DEEP)
    if not isinstance(data, dict):
        raise ValidationError("Request body must be a JSON object")
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise ValidationError(pydantic_message(exc)) from None
