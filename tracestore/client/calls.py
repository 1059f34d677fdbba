"""How the client calls the tracestore API: the service's base URL as a user gives it and
``ApiCaller``, whose one request helper sends the token, retries what is safe to send again
and turns an error answer into its ``tracestore.errors`` class (chosen by the envelope's
code); with the helpers that put an id into a URL path, a body into JSON and read an answer.

It imports no server dependency.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Self, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel

from tracestore import jsontext
from tracestore.client.retries import (
    RETRY_STATUSES,
    RetryPolicy,
    api_error,
    network_error,
    unreached_error,
)
from tracestore.client.sendfile import default_transport
from tracestore.errors import (
    NO_ROUTE,
    InternalError,
    NoServiceAtUrl,
    NotFound,
    RouteNotOffered,
    TracestoreError,
)

API_PREFIX = "/api/v1"
API = API_PREFIX + "/tracesets"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)

Answer = TypeVar("Answer", bound=BaseModel)


def answer(response: httpx.Response, model: type[Answer]) -> Answer:
    """The answer as ``model``; jsontext keeps workloadMetadata numbers as written."""
    try:
        return model.model_validate(jsontext.loads(response.content))
    except ValueError as exc:  # not JSON, or not the shape this client knows
        raise InternalError(
            f"Unexpected answer from {response.request.method} {response.request.url.path} "
            f"(is {response.request.url.host} a tracestore service?): {exc}",
            request_id=response.headers.get("x-request-id"),
            status=response.status_code,
        ) from None


def _unrouted(response: httpx.Response) -> bool:
    """Whether a 404 says that no route matched (a tracestore's ``No route`` or no error
    envelope at all: another web server), rather than that a traceset or file is missing."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        message = None
    return not isinstance(message, str) or message.startswith(NO_ROUTE)


def segment(value: str) -> str:
    """An id as one URL path segment (a stray ``/`` or ``..`` never changes the route)."""
    return quote(value, safe="")


def body_text(value: object) -> bytes:
    """A request body as JSON, with workloadMetadata numbers exactly as written."""
    return jsontext.dumps(value).encode()


def service_base_url(url: str) -> str:
    """The base of the service's routes for the URL a user gave: ``http(s)://host[:port]``
    and an optional path prefix, without a trailing slash or the routes' own ``/api/v1``
    (given it, users meant the service). ValueError, naming what to write, for anything
    that cannot reach a service: it would otherwise be retried as if the service were down."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        given = url.strip()
        hint = (
            f": did you mean http://{given}?"
            if given and "://" not in given
            else " (for example http://127.0.0.1:8000)"
        )
        raise ValueError(
            f"The service URL must start with http:// or https:// and name a host, got "
            f"{url!r}{hint}"
        )
    base = str(parsed.copy_with(query=None, fragment=None)).rstrip("/")
    return base.removesuffix(API_PREFIX).rstrip("/")


class ApiCaller:
    """The tracestore API at ``base_url``, called with the API token ``token`` through one
    request helper (``_call``); ``ApiClient`` adds the routes' typed methods. ``reached``:
    the service is known to be there (a connection it refuses is a restart, waited out as
    for a service that has answered this client)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        http: httpx.Client | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        reached: bool = False,
    ) -> None:
        self.base_url = service_base_url(base_url)
        # Whether the service has answered this client once (or is ``reached``, known to be
        # there): until then a connection refused is a wrong URL more likely than a restart,
        # retried for ``RetryPolicy.unreached_patience`` only.
        self.reached = reached
        self._auth = {"Authorization": f"Bearer {token}"}
        self._owns_http = http is None
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        self.http = http or httpx.Client(
            timeout=self._timeout,
            limits=limits,
            # Part bodies over http:// go out with sendfile (tracestore/client/sendfile.py).
            transport=default_transport(limits),
            follow_redirects=True,
        )
        self.retry = retry or RetryPolicy()

    def close(self) -> None:
        """Close the connections this client opened (not an ``http`` handed in)."""
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: list[tuple[str, str]] | None = None,
        body: object = None,
        idempotent: bool = True,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """One API request with the token; idempotent ones are retried on network errors and
        5xx. Any other error answer raises its tracestore exception."""
        url = self.base_url + path
        headers = dict(self._auth)
        content = None
        if body is not None:
            content = body_text(body)
            headers["Content-Type"] = "application/json"
        tries = self.retry.tries()
        while True:
            began = time.monotonic()
            try:
                response = self.http.request(
                    method,
                    url,
                    params=urlencode(params) if params else None,
                    content=content,
                    headers=headers,
                    # An injected client (a TestClient) keeps its own timeouts.
                    timeout=self._request_timeout(timeout)
                    if self._owns_http
                    else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                # A request that never connected was never seen: safe to send again.
                connecting = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                error: TracestoreError = network_error(exc, url)
                if not (idempotent or connecting):
                    raise error from None
                if connecting and not self.reached:
                    error = unreached_error(exc, self.base_url)
                tries.failed(
                    error,
                    reached=self.reached or not connecting,
                    since=began if connecting else None,
                )
                continue
            self.reached = True
            if response.status_code < 400:
                return response
            error = api_error(response)
            if response.status_code == 404 and _unrouted(response):
                raise self._unrouted_error(path, response)
            if not (idempotent and response.status_code in RETRY_STATUSES):
                raise error
            tries.failed(error)

    def _unrouted_error(self, path: str, response: httpx.Response) -> NotFound:
        """A 404 that no route of the API answered: the URL has no tracestore API (the
        listing, which every version serves, is not there either) or the service is an
        older one without ``path``."""
        asked = f"{response.request.method} {response.request.url.path}"
        request_id = response.headers.get("x-request-id")
        if path != API and self._serves_listing():
            return RouteNotOffered(
                f"The service at {self.base_url} does not offer {asked}", request_id=request_id
            )
        return NoServiceAtUrl(
            f"No tracestore API at {self.base_url} ({asked} answered 404 Not Found)",
            request_id=request_id,
        )

    def _serves_listing(self) -> bool:
        """Whether a route every tracestore service has answers at ``base_url``."""
        try:
            probe = self.http.get(
                self.base_url + API,
                params={"limit": "1"},
                headers=self._auth,
                timeout=self._timeout if self._owns_http else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError:
            return False
        return not (probe.status_code == 404 and _unrouted(probe))

    def _request_timeout(self, timeout: httpx.Timeout | None) -> httpx.Timeout:
        """A request's timeouts: ``timeout`` or the client's, but connecting to a service
        that has not answered yet takes no longer than the patience it gets (a connection
        dropped without a word is a wrong address more likely than a slow one)."""
        chosen = timeout or self._timeout
        connect = max(1.0, self.retry.unreached_patience)
        if self.reached or chosen.connect is None or chosen.connect <= connect:
            return chosen
        return httpx.Timeout(
            connect=connect, read=chosen.read, write=chosen.write, pool=chosen.pool
        )
