"""What every route shares, once: the dependency aliases (the services of the running app,
the caller and its token, the base of the URLs handed back to it) and the error
responses routes document (``error_responses``).

A route that calls a use case takes ``CallerDep`` and ``await caller.run(use_case, ...)``:
the token is checked and the use case runs in one worker thread, their reads on one
database session (``caller.read`` for a short read and ``caller.write`` for a short write,
which the database drives as it can: ``Database.short_read``, ``Database.short_write``).
Every other dependency here is async: resolving it costs no thread."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar, cast

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool

from tracestore import schemas
from tracestore.errors import Unauthorized
from tracestore.server.auth import (
    UNAUTHORIZED_MESSAGE,
    Principal,
    authenticate_api_token,
    hash_token,
)
from tracestore.server.presigned import request_base_url, request_origin
from tracestore.server.services import Services

P = ParamSpec("P")
T = TypeVar("T")


async def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)


@dataclass(frozen=True)
class Caller:
    """Who sent the request, not yet checked: the bearer token and the services to check
    it with."""

    services: Services
    token: str

    def principal(self) -> Principal:
        """The caller the token names, or Unauthorized (blocking: the database)."""
        services = self.services
        verifier = services.jwt_verifier
        if verifier is not None and self._is_jwt():
            return verifier.authenticate(services.db, self.token, services.now())
        now, cache = services.now(), services.token_cache
        cached = cache.get(hash_token(self.token), now)  # no session opened for it
        if cached is not None:
            return cached
        with services.db.session(write=False) as session:
            return authenticate_api_token(session, self.token, now, cache)

    async def run(
        self,
        use_case: Callable[Concatenate[Services, Principal, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``use_case(services, principal, *args, **kwargs)`` in one worker thread, after
        checking the token there (``call``)."""
        return await run_in_threadpool(lambda: self.call(use_case, *args, **kwargs))

    async def read(
        self,
        use_case: Callable[Concatenate[Services, Principal, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Like ``run``, for a use case that only reads the database, a bounded amount, and
        does no other I/O (a traceset by id, a page of the list): a short read, which the
        database drives (``Database.short_read``: on SQLite on the event loop's thread). A
        JWT's check may fetch the identity provider's keys: not short, a worker thread."""
        if self._is_jwt():
            return await self.run(use_case, *args, **kwargs)
        work = functools.partial(self.call, use_case, *args, **kwargs)
        return await self.services.db.short_read(work)

    async def write(
        self,
        use_case: Callable[Concatenate[Services, Principal, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Like ``run``, for a use case whose one write session is its only side effect
        before the end, a short one, and whose other I/O is local (upload-url's start on
        the embedded store): a short write, which the database drives
        (``Database.short_write``: on SQLite on the event loop's thread if the write lock
        is free at once). A JWT's check is not short: a worker thread."""
        if self._is_jwt():
            return await self.run(use_case, *args, **kwargs)
        work = functools.partial(self.call, use_case, *args, **kwargs)
        return await self.services.db.short_write(work)

    def call(
        self,
        use_case: Callable[Concatenate[Services, Principal, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``use_case(services, principal, *args, **kwargs)`` here (blocking), after checking
        the token; the check's read and the use case's first share one database session
        (``Database.shared_reads``)."""
        with self.services.db.shared_reads():
            return use_case(self.services, self.principal(), *args, **kwargs)

    def _is_jwt(self) -> bool:
        return self.services.jwt_verifier is not None and self.token.count(".") == 2


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header's value, read as FastAPI's
    ``HTTPBearer`` reads it; Unauthorized when there is none."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    token = credentials.strip() if scheme.lower() == "bearer" else ""
    if not token:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return token


class _BearerCaller(HTTPBearer):
    """The caller named by ``Authorization: Bearer <token>``; 401 at once when there is none
    (whether it is valid is checked by ``Caller.run``). One dependency that reads the header
    and the app's services itself: FastAPI resolving three (the services, HTTPBearer, this)
    was a tenth of a GET's CPU. Still an ``HTTPBearer``, so the OpenAPI document names the
    scheme on every route that takes it, as before."""

    async def __call__(self, request: Request) -> Caller:  # type: ignore[override]
        token = bearer_token(request.headers.get("authorization"))
        return Caller(cast(Services, request.app.state.services), token)


caller_of = _BearerCaller(
    auto_error=False,
    scheme_name="HTTPBearer",
    description="An API token or a JWT access token",
)


def authenticated(caller: Annotated[Caller, Depends(caller_of)]) -> Principal:
    """The checked caller, for a route that needs one outside ``Caller.run`` (a thread of
    its own: prefer ``CallerDep``)."""
    return caller.principal()


async def base_url_of(request: Request, services: Annotated[Services, Depends(services_of)]) -> str:
    """Where the caller reaches the service (``presigned.request_base_url``), as a
    dependency; ValidationError for a malformed Host or X-Forwarded-* header."""
    return request_base_url(request_origin(request.scope, services.settings))


ServicesDep = Annotated[Services, Depends(services_of)]
CallerDep = Annotated[Caller, Depends(caller_of)]
PrincipalDep = Annotated[Principal, Depends(authenticated)]
BaseUrlDep = Annotated[str, Depends(base_url_of)]

_DESCRIPTIONS = {
    300: "Several resources match; the message names them",
    400: "Validation error: the message names the member or parameter at fault",
    401: "Invalid or missing authentication token",
    403: "Forbidden",
    404: "Not found, or not visible to the caller",
    409: "Conflict: the resource's state does not allow the request",
    410: "Gone: the resource has expired",
    412: "Precondition failed",
    413: "Payload too large",
    416: "The range asked for lies outside the blob",
    422: "Unprocessable: the content fails a semantic check",
    429: "Too many requests of this kind at once; retry later",
    500: "Internal error",
    501: "Not offered by this service",
    503: "A dependency is unreachable (the identity provider's signing keys, with JWT login)",
}


def error_responses(*statuses: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """The error answers of one route, each with the envelope as its body: exactly the
    statuses it can answer (``described`` words one for this route, e.g. ``s412="..."``)."""
    return {
        status: {
            "model": schemas.ErrorEnvelope,
            "description": described.get(f"s{status}", _DESCRIPTIONS[status]),
        }
        for status in statuses
    }


# Every API route: no or a bad token (401), an unexpected error (500), the JWKS unreachable
# when a JWT is presented (503).
API_ERRORS = (401, 500, 503)


def query_parameter(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An optional query parameter as OpenAPI describes it, for the routes that read their
    query themselves (the list routes: open-ended names, one message per bad value)."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }
