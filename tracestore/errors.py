"""The one error hierarchy shared by server, client and command line.

Each class carries the HTTP status and the wire code of the error envelope
``{"error": {"code", "message", "requestId"}}``. The server raises them; the client
maps a response's ``code`` back to the same class through ``ERRORS_BY_CODE``.
"""

from __future__ import annotations

from typing import ClassVar

# The most of a given value an error message repeats: a message never echoes a huge input.
QUOTE_LIMIT = 80


def shortened(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters (``…`` marks the cut), for an error message."""
    return text if len(text) <= limit else text[:limit] + "…"


def quoted(value: str, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as an error message quotes it: ``repr`` of it, ``shortened``."""
    return shortened(repr(value), limit)


# How the service's 404 for a path that no route serves begins (``No route GET /x``): the
# client tells it from a 404 about a traceset or a file that does not exist.
NO_ROUTE = "No route"


class TracestoreError(Exception):
    """Base of every error tracestore reports; carries status, code, message, request id."""

    status: int = 500
    code: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(
        self, message: str, *, request_id: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        # The client records the status it actually received (a proxy may answer 502).
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class ValidationError(TracestoreError):
    """The request is malformed or breaks a rule (400)."""

    status = 400
    code = "VALIDATION_ERROR"


class Unauthorized(TracestoreError):
    """No valid bearer token was presented (401)."""

    status = 401
    code = "UNAUTHORIZED"


class Forbidden(TracestoreError):
    """The caller may not act on what it named, or a presigned URL is invalid (403)."""

    status = 403
    code = "FORBIDDEN"


class NotFound(TracestoreError):
    """The resource does not exist, or the caller may not see it (404)."""

    status = 404
    code = "NOT_FOUND"


class MethodNotAllowed(TracestoreError):
    """The route exists but not with this HTTP method (405)."""

    status = 405
    code = "METHOD_NOT_ALLOWED"


class MultipleChoices(TracestoreError):
    """A short reference (a hash prefix) names more than one resource; the message names
    them (300)."""

    status = 300
    code = "MULTIPLE_CHOICES"


class Conflict(TracestoreError):
    """The resource is in a state that does not allow the request (409)."""

    status = 409
    code = "CONFLICT"


class Gone(TracestoreError):
    """The resource existed but has expired (410)."""

    status = 410
    code = "GONE"


class PreconditionFailed(TracestoreError):
    """A precondition of the request does not hold (412)."""

    status = 412
    code = "PRECONDITION_FAILED"


class PayloadTooLarge(TracestoreError):
    """A body, part or file is larger than allowed or declared (413)."""

    status = 413
    code = "PAYLOAD_TOO_LARGE"


class TooManyRequests(TracestoreError):
    """Too many requests of one kind at once (part bodies of one upload); retry later."""

    status = 429
    code = "TOO_MANY_REQUESTS"


class UnprocessableEntity(TracestoreError):
    """The request is well-formed but its content fails a semantic check (422)."""

    status = 422
    code = "UNPROCESSABLE_ENTITY"


class InternalError(TracestoreError):
    """Something unexpected went wrong on the server (500)."""

    status = 500
    code = "INTERNAL_ERROR"


class NotImplementedByService(TracestoreError):
    """The route is deliberately not offered (501)."""

    status = 501
    code = "NOT_IMPLEMENTED"


class ServiceUnavailable(TracestoreError):
    """A dependency of the service (database, blob store) is not reachable (503)."""

    status = 503
    code = "SERVICE_UNAVAILABLE"


ERRORS_BY_CODE: dict[str, type[TracestoreError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        MultipleChoices,
        Conflict,
        Gone,
        PreconditionFailed,
        PayloadTooLarge,
        UnprocessableEntity,
        TooManyRequests,
        InternalError,
        NotImplementedByService,
        ServiceUnavailable,
    )
}

ERRORS_BY_STATUS: dict[int, type[TracestoreError]] = {
    cls.status: cls for cls in ERRORS_BY_CODE.values()
}


# --- raised by the client alone: no wire code, so not in the tables above ---


class NetworkError(TracestoreError):
    """The service could not be reached, or the connection broke (no HTTP answer; status 0)."""

    status = 0
    code = "NETWORK_ERROR"


class NoServiceAtUrl(NotFound):
    """A 404 for a route every tracestore service has: nothing at the client's URL serves
    the API (a wrong path, or another web server at that address)."""

    code = "NO_SERVICE_AT_URL"


class RouteNotOffered(NotFound):
    """The service at the URL answers, but has no such route (an older version)."""

    code = "ROUTE_NOT_OFFERED"


class IntegrityError(TracestoreError):
    """Bytes on disk do not match what the service recorded (size or SHA-256)."""

    status = 0
    code = "INTEGRITY_ERROR"


class UploadIncomplete(TracestoreError):
    """An upload stopped after its session was created; it can be resumed by its id."""

    status = 0
    code = "UPLOAD_INCOMPLETE"

    def __init__(
        self, message: str, *, upload_id: str, traceset_id: str, cause: TracestoreError | None
    ) -> None:
        super().__init__(message, request_id=cause.request_id if cause else None)
        self.upload_id = upload_id
        self.traceset_id = traceset_id
        self.cause = cause
