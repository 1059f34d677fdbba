"""Where a local ``tracestore serve`` listens: the record it keeps in its data directory
while it runs, and how the client commands find it.

``serve`` writes ``<data-dir>/service.json`` once its socket is bound and removes it when it
stops. A client command with no ``--url`` (and no ``TRACESTORE_URL``) talks to the service
that record names, and the data directory's admin token is only ever sent to that service:
the record must be from this machine, its process alive, and its URL the one in use.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

SERVICE_FILE = "service.json"
ADMIN_TOKEN_FILE = "admin-token"  # written by the server's bootstrap (server/auth.py)


@dataclass(frozen=True)
class LocalService:
    """A running ``tracestore serve``: the URL this machine reaches it at, and its process."""

    url: str
    pid: int
    hostname: str

    def is_running(self) -> bool:
        """Whether the record is from this machine and its process still exists."""
        if self.hostname != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, another user's
            return True
        return True


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a service bound to ``host``: a wildcard
    bind is reached on the loopback address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{shown}:{port}"


def record_service(data_dir: Path, url: str) -> Path:
    """Write the record of this process serving at ``url``; the path, to remove it after."""
    path = data_dir / SERVICE_FILE
    tmp = path.with_name(f".{SERVICE_FILE}.{os.getpid()}")
    record = {"url": url, "pid": os.getpid(), "hostname": socket.gethostname()}
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(path)
    return path


def forget_service(path: Path) -> None:
    """Remove the record if it is still this process's (a later serve may have replaced it)."""
    found = read_service(path.parent)
    if found is not None and found.pid == os.getpid():
        path.unlink(missing_ok=True)


def read_service(data_dir: Path) -> LocalService | None:
    """The record in ``data_dir``, or None when there is none (or it is unreadable)."""
    try:
        record = json.loads((data_dir / SERVICE_FILE).read_text())
        return LocalService(str(record["url"]), int(record["pid"]), str(record["hostname"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_data_dir() -> Path:
    """The data directory a local service uses unless told otherwise."""
    return Path(os.environ.get("TRACESTORE_DATA_DIR") or "./tracestore-data")


def same_service(a: str, b: str) -> bool:
    """Whether two URLs name the same scheme, host and port."""

    def key(url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url.strip().lower())
        default = {"http": 80, "https": 443}.get(parts.scheme)
        return parts.scheme, parts.hostname or "", parts.port or default

    try:
        return key(a) == key(b)
    except ValueError:  # a malformed port
        return False
