"""What every route shares, once: the dependency aliases (the services of the running app,
the authenticated caller, the base of the URLs handed back to it) and the error responses
every API route documents."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network
from typing import Annotated, Any, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tracestore import schemas
from tracestore.errors import Unauthorized
from tracestore.server.auth import UNAUTHORIZED_MESSAGE, Principal, authenticate_api_token
from tracestore.server.presigned import RequestOrigin, request_base_url
from tracestore.server.services import Services

_bearer = HTTPBearer(auto_error=False, description="An API token or a JWT access token")


def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)


def authenticated(
    services: Annotated[Services, Depends(services_of)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller named by ``Authorization: Bearer <token>``, or 401."""
    if credentials is None or not credentials.credentials.strip():
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    token = credentials.credentials.strip()
    verifier = services.jwt_verifier
    if verifier is not None and token.count(".") == 2:
        return verifier.authenticate(services.db, token, services.now())
    with services.db.session(write=False) as session:
        return authenticate_api_token(session, token, services.now())


def base_url_of(request: Request, services: Annotated[Services, Depends(services_of)]) -> str:
    """Where the caller reaches the service: TRACESTORE_PUBLIC_URL when set, else the
    request's own scheme and Host (X-Forwarded-* only from a trusted proxy)."""
    settings = services.settings
    if settings.public_url:
        return settings.public_url
    peer = request.client.host if request.client else None
    server = request.scope.get("server")
    origin = RequestOrigin(
        scheme=request.url.scheme,
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
PrincipalDep = Annotated[Principal, Depends(authenticated)]
BaseUrlDep = Annotated[str, Depends(base_url_of)]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": schemas.ErrorEnvelope, "description": description}
    for status, description in (
        (400, "Validation error"),
        (401, "Invalid or missing authentication token"),
        (403, "Forbidden"),
        (404, "Not found"),
        (409, "Conflict"),
        (410, "Gone"),
        (413, "Payload too large"),
        (500, "Internal error"),
    )
}

# The presigned routes (``/blobs``) take no bearer token: the signature is the grant, so a
# bad one answers 403, never 401.
PRESIGNED_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: response for status, response in ERROR_RESPONSES.items() if status != 401
}
