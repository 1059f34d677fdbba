"""How the client retries, and what it raises: the retry policy and the one retry loop
(``Retries``), and the mapping of an error answer or a network failure to its
``tracestore.errors`` class.
"""

from __future__ import annotations

import math
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import httpx

from tracestore.errors import ERRORS_BY_CODE, ERRORS_BY_STATUS, NetworkError, TracestoreError

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class RetryWait(NamedTuple):
    """A retry about to wait: why (the error of the try that failed), which try comes next
    (2 for the first retry), the seconds until it, and whether the service had answered
    before (if not, the URL may be wrong rather than the service restarting)."""

    reason: TracestoreError
    attempt: int
    delay: float
    reached: bool = True


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a network error or a 5xx answer: with backoff,
    until ``attempts`` tries or until it has failed for ``patience`` seconds, whichever comes
    first. The default rides out a service restart of half a minute. A service that has not
    answered once (a wrong URL, nothing listening) gets ``unreached_patience`` seconds
    instead: waiting a minute for it helps nobody. ``on_wait`` hears of every wait (the
    command line says it is waiting)."""

    attempts: int = 100
    base_delay: float = 0.25
    max_delay: float = 5.0
    patience: float = 60.0
    unreached_patience: float = 2.5
    on_wait: Callable[[RetryWait], None] | None = field(default=None, compare=False)

    def delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter, so parallel retries do not march in step."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))

    def gives_up(self, attempt: int, failing_since: float, *, reached: bool = True) -> bool:
        """Whether try ``attempt`` (from 0), which just failed, was the last: the tries are
        used up, or the first failure was ``patience`` seconds ago (``failing_since``, by
        ``time.monotonic()``; a try that takes long is not failing while it runs), or
        ``unreached_patience`` seconds ago when the service never ``reached`` answered."""
        return attempt + 1 >= self.attempts or self.patience_left(failing_since, reached) <= 0

    def patience_left(self, failing_since: float, reached: bool = True) -> float:
        """Seconds of patience left for a request failing since ``failing_since``."""
        patience = self.patience if reached else min(self.patience, self.unreached_patience)
        return patience - (time.monotonic() - failing_since)

    def wait(
        self,
        attempt: int,
        reason: TracestoreError,
        stop: threading.Event | None = None,
        *,
        reached: bool = True,
        at_most: float = math.inf,
    ) -> None:
        """Sleep before try ``attempt + 1`` (cut short when ``stop`` is set), no longer than
        ``at_most`` seconds (the patience left: the last try comes before it runs out)."""
        delay = min(self.delay(attempt), at_most)
        if self.on_wait is not None:
            self.on_wait(RetryWait(reason, attempt + 2, delay, reached))
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)

    def tries(self, stop: threading.Event | None = None) -> Retries:
        """The count of one request's tries under this policy."""
        return Retries(self, stop)


@dataclass
class Retries:
    """The tries of one request (an API call, a part PUT, a download) under ``policy``: the
    one retry loop of the client. After a try fails, ``failed`` waits before the next or
    raises the error when that try was the last; ``progressed`` starts over (bytes came)."""

    policy: RetryPolicy
    stop: threading.Event | None = None
    attempt: int = 0
    failing_since: float | None = None

    def failed(
        self, error: TracestoreError, *, reached: bool = True, since: float | None = None
    ) -> None:
        """Wait before the next try, or raise ``error`` when the policy gives up (sooner
        when the service was never ``reached``). ``since``: when the try that failed began,
        for a try that failed all along (a connection that timed out)."""
        self.failing_since = self.failing_since or since or time.monotonic()
        if self.policy.gives_up(self.attempt, self.failing_since, reached=reached):
            raise error from None
        left = self.policy.patience_left(self.failing_since, reached)
        self.policy.wait(self.attempt, error, self.stop, reached=reached, at_most=left)
        self.attempt += 1

    def progressed(self) -> None:
        """The failing try moved bytes: count its failures anew."""
        self.attempt, self.failing_since = 0, None

    @property
    def last_try(self) -> bool:
        """Whether the next try is the last the policy allows by count."""
        return self.attempt + 1 >= self.policy.attempts


def api_error(response: httpx.Response) -> TracestoreError:
    """The tracestore exception for an error answer, mapped by its envelope's code."""
    code = message = request_id = None
    try:
        error = response.json().get("error") or {}
        code, message, request_id = error.get("code"), error.get("message"), error.get("requestId")
    except (ValueError, AttributeError):
        pass
    cls = ERRORS_BY_CODE.get(str(code)) or ERRORS_BY_STATUS.get(response.status_code)
    if cls is None:
        cls = TracestoreError
    if not message:
        text = response.text.strip().replace("\n", " ")[:200]
        message = f"HTTP {response.status_code} from {response.request.url.host}: {text}"
    return cls(
        str(message),
        request_id=request_id or response.headers.get("x-request-id"),
        status=response.status_code,
    )


def network_error(exc: httpx.TransportError, url: httpx.URL | str) -> NetworkError:
    return NetworkError(f"Cannot reach {_origin(url)}: {exc or type(exc).__name__}")


def unreached_error(exc: httpx.TransportError, base_url: str) -> NetworkError:
    """The error for a service that never answered: what went wrong connecting to
    ``base_url`` and, in the same line, what of the URL to check."""
    cause = _os_error(exc)
    if isinstance(cause, socket.gaierror):
        host = httpx.URL(base_url).host
        why = f"no host named {host} is known ({cause.strerror or cause}); check the host name"
    elif isinstance(cause, ConnectionRefusedError):
        why = "connection refused; check the port, and that the service is running"
    elif isinstance(exc, httpx.ConnectTimeout):
        why = "connecting timed out; check the host and the port (a firewall may drop them)"
    else:
        why = f"{exc or type(exc).__name__}; check the host and the port"
    return NetworkError(f"Nothing has answered at {base_url}: {why}")


def _origin(url: httpx.URL | str) -> str:
    where = httpx.URL(str(url))
    return f"{where.scheme}://{where.host}" + (f":{where.port}" if where.port else "")


def _os_error(exc: BaseException) -> OSError | None:
    """The operating system's error under a transport error (httpx and httpcore wrap it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
