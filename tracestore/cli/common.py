"""What the commands share: --url/--token, finding the local admin token, --json, reading
a metadata file, the quick local inspection before an upload, and the error exit."""

from __future__ import annotations

import functools
import ipaddress
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from tracestore import jsontext
from tracestore.cli.output import error_lines, waiting_notice
from tracestore.client import Client, RetryPolicy
from tracestore.client.transfers import collect_files
from tracestore.errors import TracestoreError
from tracestore.inspect import inspect_path, rank_census

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_API_ERROR = 1
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(url: str, token: str | None) -> str:
    """The token given, else (for a service on this machine only) the local admin token."""
    if token:
        return token
    if _is_local(url):
        data_dir = Path(os.environ.get("TRACESTORE_DATA_DIR") or "./tracestore-data")
        path = data_dir / "admin-token"
        if path.is_file():
            return path.read_text().strip()
    raise click.UsageError(
        "No API token: pass --token or set TRACESTORE_TOKEN (for a local `tracestore serve`, "
        "run this where its tracestore-data directory is, or set TRACESTORE_DATA_DIR)."
    )


def retry_policy() -> RetryPolicy:
    """The client's retries, saying when they wait; ``TRACESTORE_RETRY_SECONDS`` (default
    60) is how long a command keeps retrying a service that fails or cannot be reached."""
    given = os.environ.get("TRACESTORE_RETRY_SECONDS")
    try:
        patience = float(given) if given else RetryPolicy.patience
    except ValueError:
        raise click.UsageError(f"TRACESTORE_RETRY_SECONDS={given!r} is not a number") from None
    return RetryPolicy(patience=patience, on_wait=waiting_notice())


def connection(command: F) -> F:
    """Adds --url and --token and turns them into a ``Client`` passed as ``client``."""

    @click.option(
        "--url",
        envvar="TRACESTORE_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Service URL (or TRACESTORE_URL).",
    )
    @click.option("--token", envvar="TRACESTORE_TOKEN", help="API token (or TRACESTORE_TOKEN).")
    @functools.wraps(command)
    def wrapper(url: str, token: str | None, **kwargs: Any) -> Any:
        # Tests hand in an httpx client on the app in-process: ``main(obj={"http": ...})``.
        obj = click.get_current_context().obj
        http = obj.get("http") if isinstance(obj, dict) else None
        with Client(url, resolve_token(url, token), http=http, retry=retry_policy()) as client:
            try:
                return command(client=client, **kwargs)
            except TracestoreError as exc:
                for line in error_lines(exc):
                    click.echo(line, err=True)
                sys.exit(EXIT_API_ERROR)

    return wrapper  # type: ignore[return-value]


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def read_metadata(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return jsontext.loads(path.read_bytes())
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--workload-metadata"
        ) from None
    except ValueError as exc:
        raise click.BadParameter(
            f"{path} is not JSON: {exc}", param_hint="--workload-metadata"
        ) from None


def census_problems(
    paths: Sequence[Path], role: str, metadata: Any, declared: int | None
) -> list[str]:
    """What a quick local inspection finds wrong with the primary files (empty if none)."""
    if role != "primary":
        return []
    try:
        files = [
            (f.name, inspect_path(f.path, f.name, quick=True))
            for f in collect_files(paths, "primary")
        ]
        census = rank_census(files, declared_rank_count=declared, workload_metadata=metadata)
    except Exception as exc:  # an inspection bug must never stop an upload
        return [f"the local inspection failed ({type(exc).__name__}: {exc}); not checked"]
    checks = (census.rank_count_matches, census.parallelism_consistent)
    return [check.message for check in checks if not check.passed]
