"""What every route shares, once: the dependency aliases (the services of the running app,
the caller and its token, the base of the URLs handed back to it) and the error
responses routes document (``error_responses``).

A route that calls a use case takes ``CallerDep`` and ``await caller.run(use_case, ...)``:
the token is checked and the use case runs in one worker thread, their reads on one
database session (``caller.read`` for a short read, which on SQLite needs no thread).
Every other dependency here is async: resolving it costs no thread."""

from __future__ import annotations

import asyncio
import ipaddress
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network
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
from tracestore.server.db.loop_writes import WriterBusy
from tracestore.server.presigned import RequestOrigin, request_base_url
from tracestore.server.services import Services, stores_bytes_locally
from tracestore.server.settings import Settings

# How often the loop looks again for this process's writer to end (doubling to the most):
# a checkpoint holds it ~5 ms, a worker thread's write about as long.
_WRITER_POLL = 0.000_25
_WRITER_POLL_MAX = 0.008

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
        does no other I/O (a traceset by id, a page of the list). On SQLite with an API
        token it runs on the event loop's own thread: a worker thread gives the GIL up at
        every statement and waits to take it back from the loop (the GIL convoy: a GET
        answered 2.5-4 x fewer requests per second so, bench/load.py). WAL readers never
        wait for a writer, so nothing blocks there. A server database's round trips and
        a JWT check (which may fetch the signing keys) keep to a worker thread."""
        if self._is_jwt():
            return await self.run(use_case, *args, **kwargs)
        return await short_read(self.services, lambda: self.call(use_case, *args, **kwargs))

    async def write(
        self,
        use_case: Callable[Concatenate[Services, Principal, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Like ``run``, for a use case whose one write session is its only side effect
        before the end, a short one, and whose other I/O is local (upload-url's start). On
        SQLite with the embedded blob store and an API token it runs on the event loop's
        own thread if the write lock is free at once (``short_write``)."""
        if self._is_jwt():
            return await self.run(use_case, *args, **kwargs)
        return await short_write(self.services, lambda: self.call(use_case, *args, **kwargs))

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


async def short_read(
    services: Services, read: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``read(*args, **kwargs)``, a short read of the database (and of nothing slower than
    a local file), on the event loop's own thread when the database allows it
    (``Database.reads_inline``: SQLite), else in a worker thread (``Caller.read`` says
    why)."""
    if services.db.reads_inline:
        with services.db.inline_reads():
            return read(*args, **kwargs)
    return await run_in_threadpool(read, *args, **kwargs)


async def short_write(services: Services, write: Callable[[], T]) -> T:
    """``write()`` on the event loop's own thread if the database allows it and its write
    lock is free at once (``Database.writes_now``), else in a worker thread that waits for
    the lock: a write run again there did nothing here (``nowait.WriterBusy``). While a
    thread of this process holds the lock, the loop's writes wait for it in turn (first
    come, first written), answering others meanwhile. The loop's writes leave the WAL
    checkpoint to a worker thread, every so often."""
    nowait = services.db.nowait
    if nowait is not None and stores_bytes_locally(services.settings):
        async with _loop_writers():
            delay = _WRITER_POLL
            while True:
                while nowait.writer_held():
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, _WRITER_POLL_MAX)
                try:
                    with services.db.writes_now():
                        result = write()
                except WriterBusy as busy:
                    if busy.here:  # taken since writer_held looked; write() did not run
                        continue
                    break
                if nowait.checkpoint_due():
                    asyncio.get_running_loop().run_in_executor(None, nowait.checkpoint)
                return result
    return await run_in_threadpool(write)


def _loop_writers() -> asyncio.Lock:
    """The running loop's queue of writes (an asyncio lock is its loop's alone)."""
    loop = asyncio.get_running_loop()
    lock = _LOOP_WRITERS.get(loop)
    if lock is None:
        lock = _LOOP_WRITERS[loop] = asyncio.Lock()
    return lock


_LOOP_WRITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


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
    """``base_url`` of the request, as a dependency."""
    return base_url(request, services.settings)


def base_url(request: Request, settings: Settings) -> str:
    """Where the caller reaches the service: TRACESTORE_PUBLIC_URL when set, else the
    request's own scheme and Host (X-Forwarded-* only from a trusted proxy); ValidationError
    for a malformed Host or X-Forwarded-* header."""
    if settings.public_url:
        return settings.public_url
    peer = request.client.host if request.client else None
    server = request.scope.get("server")
    origin = RequestOrigin(
        scheme=str(request.scope.get("scheme", "http")),  # request.url's (not built for it)
        host=request.headers.get("host"),
        local=(str(server[0]), int(server[1])) if server and server[1] is not None else None,
        forwarded_proto=_first(request.headers.get("x-forwarded-proto")),
        forwarded_host=_first(request.headers.get("x-forwarded-host")),
        trusted=_is_trusted(peer, settings.trusted_proxies),
    )
    return request_base_url(origin)


def _first(value: str | None) -> str | None:
    # A chain of proxies appends; the first value is what the client sent to the first.
    return value.split(",")[0].strip() or None if value else None


def _is_trusted(peer: str | None, networks: Sequence[IPv4Network | IPv6Network]) -> bool:
    if peer is None or not networks:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in networks)


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
