"""The presigned URLs the service answers itself, all under ``/blobs``: the embedded store's
part PUT and content GET, and the archive GET of a traceset (whatever the store: an object
store cannot zip). Their paths and HMAC-SHA256 signatures are here and nowhere else; the
routes that answer them are ``routes/blobs.py``. The host in front (``base_url``) is where
the caller reaches the service: ``TRACESTORE_PUBLIC_URL`` when set, else the request's own
scheme and host (``request_base_url`` of the request's ``request_origin``), which the route
layer hands down.

The keys are shared by every process of a service through the database (``signing_keys``,
``rotate_signing_key``), so a URL minted by one replica is honoured by any other; a
``TRACESTORE_SIGNING_KEY`` replaces them."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import itertools
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from tracestore.errors import Forbidden, ValidationError
from tracestore.server.db import SigningKey
from tracestore.server.db.database import Database, serialize
from tracestore.server.settings import Settings

log = logging.getLogger("tracestore.presigned")

# How long a process signs with the keys it read before reading them again, so a rotation
# made elsewhere reaches it; a signature that matches none of them rereads at once.
KEY_REFRESH = timedelta(seconds=30)
_RECHECK_SECONDS = 1.0

PREFIX = "/blobs"
# Route paths, relative to PREFIX.
PART = "/parts/{upload_id}/{position}/{part_number}"
CONTENT = "/content/{sha256}"
ARCHIVE = "/archive/{traceset_id}"
_SIGNATURE = re.compile(r"([?&]signature=)[^&#]*")


def redacted(target: str) -> str:
    """A path and query (or URL) without its signature, for a log: a presigned URL's
    signature is the grant, replayable by whoever reads it until it expires."""
    # The access log asks for every request: most have no signature to look for.
    return _SIGNATURE.sub(r"\1REDACTED", target) if "signature=" in target else target


@dataclass(frozen=True)
class PartGrant:
    """What a part URL grants: a PUT of ``size`` bytes as part ``part_number`` of the file
    at ``position`` of an upload (whose files have parts of ``part_size``), until ``expires``."""

    upload_id: str
    position: int
    part_number: int
    size: int
    part_size: int
    expires: int


KeyLoader = Callable[[], Sequence[bytes]]


class UrlSigner:
    """Signs and checks the service's presigned URLs; one per service (``Services.signer``).
    The first key signs; every key verifies. With ``reload`` (the database's keys, newest
    first) the keys are reread every ``KEY_REFRESH`` and when a signature matches none.
    ``expires`` is a Unix time in seconds."""

    def __init__(
        self, key: bytes, previous: Sequence[bytes] = (), *, reload: KeyLoader | None = None
    ) -> None:
        self._keys = (key, *previous)
        self._reload = reload
        self._loaded_at = time.monotonic()
        self._lock = threading.Lock()

    @property
    def key(self) -> bytes:
        """The key that signs now (also the listing cursors' HMAC key)."""
        if time.monotonic() - self._loaded_at >= KEY_REFRESH.total_seconds():
            self._refresh()
        return self._keys[0]

    def _refresh(self) -> bool:
        """Reread the keys (at most once a second); whether they were reread."""
        if self._reload is None:
            return False
        with self._lock:
            if time.monotonic() - self._loaded_at < _RECHECK_SECONDS:
                return False
            self._loaded_at = time.monotonic()
            try:
                self._keys = tuple(self._reload())
            except Exception:
                # The database is away: keep signing with the keys read last (readiness
                # reports the database), and try again at the next refresh.
                log.warning("could not reread the signing keys", exc_info=True)
                return False
        return True

    def part_path(self, grant: PartGrant) -> str:
        """The path and query of a part PUT."""
        signature = self._sign(grant.expires, "PUT", *_signed_part_fields(grant))
        path = PART.format(
            upload_id=grant.upload_id, position=grant.position, part_number=grant.part_number
        )
        # As urlencode writes it, without its quoting: integers and an unpadded urlsafe
        # base64 signature hold only unreserved characters (an upload-url answer has a
        # URL per part).
        query = f"size={grant.size:d}&partSize={grant.part_size:d}&expires={grant.expires:d}"
        return f"{PREFIX}{path}?{query}&signature={signature}"

    def verify_part(self, grant: PartGrant, signature: str, now: datetime) -> None:
        """Raise Forbidden unless the part URL's signature holds and it has not expired."""
        self._verify(signature, grant.expires, now, "PUT", *_signed_part_fields(grant))

    def content_path(self, sha256: str, filename: str, expires: int) -> str:
        """The path and query of a blob GET that names its download ``filename``."""
        signature = self._sign(expires, "GET", sha256, filename)
        query = urlencode({"name": filename, "expires": expires, "signature": signature})
        return f"{PREFIX}{CONTENT.format(sha256=sha256)}?{query}"

    def verify_content(
        self, sha256: str, filename: str, expires: int, signature: str, now: datetime
    ) -> None:
        """Raise Forbidden unless the blob URL's signature holds and it has not expired."""
        self._verify(signature, expires, now, "GET", sha256, filename)

    def archive_path(self, traceset_id: str, expires: int, selection: str = "") -> str:
        """The path and query of the GET of a traceset's ZIP; ``selection`` (the ranks of a
        ranks download) travels in the query and is signed with it."""
        fields = (traceset_id, selection) if selection else (traceset_id,)
        signature = self._sign(expires, "ARCHIVE", *fields)
        query = {"expires": expires, "signature": signature}
        query.update({"select": selection} if selection else {})
        return f"{PREFIX}{ARCHIVE.format(traceset_id=traceset_id)}?{urlencode(query)}"

    def verify_archive(
        self, traceset_id: str, expires: int, signature: str, now: datetime, selection: str = ""
    ) -> None:
        """Raise Forbidden unless the archive URL's signature holds and it has not expired."""
        fields = (traceset_id, selection) if selection else (traceset_id,)
        self._verify(signature, expires, now, "ARCHIVE", *fields)

    def _sign(self, *fields: str | int, key: bytes | None = None) -> str:
        message = "\n".join(str(f) for f in fields).encode()
        digest = hmac.new(key or self.key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def _matches(self, signature: str, *fields: str | int) -> bool:
        return any(
            hmac.compare_digest(self._sign(*fields, key=key), signature) for key in self._keys
        )

    def _verify(self, signature: str, expires: int, now: datetime, *fields: str | int) -> None:
        # compare_digest refuses non-ASCII text (TypeError); a signature is ASCII or forged.
        if not signature.isascii() or not (
            self._matches(signature, expires, *fields)
            or (self._refresh() and self._matches(signature, expires, *fields))
        ):
            raise Forbidden("The URL signature does not match; request a new URL")
        if now.timestamp() >= expires:
            raise Forbidden("The URL has expired; request a new URL")


def signing_keys(
    database: Database, now: datetime, lifetime: timedelta, adopt: Path | None = None
) -> list[bytes]:
    """The service's keys, newest (the signing one) first, then those it replaced less than
    ``lifetime`` ago (the longest a URL lives). The first call on a database creates the first
    key, once for all processes: the one in the file ``adopt`` names when it exists (a data
    directory's key from before the keys moved here, so its URLs stay good), else a new one."""
    with database.session(write=False) as session:
        rows = list(session.scalars(select(SigningKey).order_by(SigningKey.id.desc())))
    if not rows:
        secret = adopt.read_text().strip() if adopt and adopt.is_file() else None
        try:
            with database.session() as session:
                serialize(session)
                if session.scalar(select(SigningKey.id).limit(1)) is None:
                    session.add(
                        SigningKey(id=1, secret=secret or secrets.token_urlsafe(48), created_at=now)
                    )
        except IntegrityError:
            pass  # another process created it first (SQLite has no advisory lock)
        return signing_keys(database, now, lifetime)
    keys = [rows[0].secret.encode()]
    for successor, row in itertools.pairwise(rows):
        if successor.created_at > now - lifetime:
            keys.append(row.secret.encode())
    return keys


def rotate_signing_key(database: Database, now: datetime, lifetime: timedelta) -> int:
    """Make a new signing key (its id); the one it replaces keeps verifying for ``lifetime``,
    and keys replaced longer ago than that are deleted."""
    with database.session() as session:
        serialize(session)
        rows = list(session.scalars(select(SigningKey).order_by(SigningKey.id.desc())))
        new_id = rows[0].id + 1 if rows else 1
        session.add(SigningKey(id=new_id, secret=secrets.token_urlsafe(48), created_at=now))
        spent = [
            row.id
            for successor, row in itertools.pairwise(rows)
            if successor.created_at <= now - lifetime
        ]
        if spent:
            session.execute(delete(SigningKey).where(SigningKey.id.in_(spent)))
    return new_id


def _signed_part_fields(grant: PartGrant) -> tuple[str | int, ...]:
    return (grant.upload_id, grant.position, grant.part_number, grant.size, grant.part_size)


# host[:port] as a Host header carries it: a name or IPv4 address, or a bracketed IPv6 one.
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?"
)


@dataclass(frozen=True)
class RequestOrigin:
    """Where a request says it was sent: what ``request_base_url`` builds a URL base from.

    ``host`` is the Host header (None when absent), ``local`` the address and port the
    connection reached (the socket's own, never a wildcard), ``forwarded_proto`` and
    ``forwarded_host`` the first X-Forwarded-Proto/-Host values, believed only when the
    peer is ``trusted`` (a configured proxy); ``public_url``, TRACESTORE_PUBLIC_URL, is the
    base whatever the request says."""

    scheme: str
    host: str | None
    local: tuple[str, int] | None
    forwarded_proto: str | None = None
    forwarded_host: str | None = None
    trusted: bool = False
    public_url: str | None = None


def request_origin(scope: Mapping[str, Any], settings: Settings) -> RequestOrigin:
    """The origin of the request of an ASGI ``scope``, its headers read as Starlette's
    ``Request.headers.get`` reads them (the first of a name); plain data, which a use case
    hands to ``request_base_url`` in its own thread (after the token's check: a bad token
    is a 401 whatever the Host says)."""
    if settings.public_url:
        return RequestOrigin(scheme="", host=None, local=None, public_url=settings.public_url)
    wanted = {b"host": None, b"x-forwarded-proto": None, b"x-forwarded-host": None}
    for key, value in scope.get("headers", ()):
        if key in wanted and wanted[key] is None:
            wanted[key] = value.decode("latin-1")
    client, server = scope.get("client"), scope.get("server")
    return RequestOrigin(
        scheme=str(scope.get("scheme", "http")),
        host=wanted[b"host"],
        local=(str(server[0]), int(server[1])) if server and server[1] is not None else None,
        forwarded_proto=_first(wanted[b"x-forwarded-proto"]),
        forwarded_host=_first(wanted[b"x-forwarded-host"]),
        trusted=_is_trusted(client[0] if client else None, settings.trusted_proxies),
    )


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


def request_base_url(origin: RequestOrigin) -> str:
    """``scheme://host[:port]`` the caller used to reach the service, so the URLs handed
    back work from where it stands. A wildcard (``0.0.0.0``, ``::``) is replaced by the
    address the connection actually reached. Raises ValidationError on a malformed
    Host or X-Forwarded-* header."""
    if origin.public_url:
        return origin.public_url
    scheme, host = origin.scheme, origin.host
    if origin.trusted and origin.forwarded_proto:
        scheme = origin.forwarded_proto.strip().lower()
        if scheme not in ("http", "https"):
            raise ValidationError(f"X-Forwarded-Proto {origin.forwarded_proto!r} is not http/https")
    if origin.trusted and origin.forwarded_host:
        host = origin.forwarded_host
        if not _HOST.fullmatch(host.strip()):
            raise ValidationError(f"X-Forwarded-Host {host!r} is not a host[:port]")
    if host is not None:
        host = host.strip()
        if not _HOST.fullmatch(host):
            raise ValidationError(f"The Host header {host!r} is not a host[:port]")
        if not _is_wildcard(host):
            return f"{scheme}://{host}"
    if origin.local is None:
        raise ValidationError("The request has no Host header; send one")
    address, port = origin.local
    return f"{scheme}://{_netloc(address, port, scheme)}"


@functools.lru_cache(maxsize=256)  # a service is reached by a few names: parsed once each
def _is_wildcard(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    try:
        return ipaddress.ip_address(name.strip("[]")).is_unspecified
    except ValueError:
        return False


def _netloc(address: str, port: int, scheme: str) -> str:
    shown = f"[{address}]" if ":" in address else address
    default = {"http": 80, "https": 443}.get(scheme)
    return shown if port == default else f"{shown}:{port}"
