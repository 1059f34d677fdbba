"""What every route shares, once: the dependency aliases (the services of the running app,
the authenticated caller) and the error responses every API route documents."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tracestore import schemas
from tracestore.errors import Unauthorized
from tracestore.server.auth import UNAUTHORIZED_MESSAGE, Principal, authenticate_api_token
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


ServicesDep = Annotated[Services, Depends(services_of)]
PrincipalDep = Annotated[Principal, Depends(authenticated)]

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
