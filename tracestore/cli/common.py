"""What the commands share: --url/--token (finding the local service and its admin token),
the --url given (for hints), --json, reading a metadata file, the quick local inspection
before an upload, and the error exit."""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from tracestore import jsontext
from tracestore.cli.local_service import (
    ADMIN_TOKEN_FILE,
    SERVICE_FILE,
    default_data_dir,
    read_service,
    same_service,
)
from tracestore.cli.output import error_lines, waiting_notice
from tracestore.errors import TracestoreError

if TYPE_CHECKING:  # the client (httpx, pydantic) loads only when a command runs
    from tracestore.client import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_API_ERROR = 1
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])

OWN_PROCESS = "own_process"
"""The key in ``click``'s context object that says the command runs in a process of its
own, started as ``tracestore`` (``tracestore.cli.run``), not called in-process by a test."""


def context_value(key: str) -> Any:
    """What the running command's context object holds under ``key`` (``main(obj={...})``:
    ``run`` and the tests hand values in this way); None without one."""
    context = click.get_current_context(silent=True)
    obj = context.obj if context is not None else None
    return obj.get(key) if isinstance(obj, dict) else None


def own_process() -> bool:
    return bool(context_value(OWN_PROCESS))


@contextmanager
def lasting_imports() -> Iterator[None]:
    """Around a command's import of the heavy modules it loads when it runs (the client:
    httpx, pydantic and the schemas). In a process of its own, the garbage collector is
    paused while they import and what they made is then frozen out of its later passes
    (``gc.freeze``): those objects last as long as the process, and the passes over them
    while they were being made cost ~10 ms of a client command's start here. Called
    in-process (tests), it changes nothing: freezing would keep a test run's garbage."""
    if not own_process() or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def resolve_connection(url: str | None, token: str | None) -> tuple[str, str]:
    """The URL and token a client command uses. Without a URL: the local ``tracestore
    serve`` recorded in the data directory, else ``DEFAULT_URL``. Without a token: the data
    directory's admin token, but only for the running service that recorded it."""
    data_dir = default_data_dir()
    recorded = read_service(data_dir)
    running = recorded if recorded is not None and recorded.is_running() else None
    if url is None:
        url = running.url if running is not None else DEFAULT_URL
    if token:
        return url, token
    admin_token = data_dir / ADMIN_TOKEN_FILE
    if running is not None and same_service(url, running.url) and admin_token.is_file():
        return url, admin_token.read_text().strip()
    if running is not None:
        why = (
            f"the admin token in {data_dir} is only sent to the service that wrote it "
            f"({running.url}), not to {url}"
        )
    elif recorded is not None:
        why = (
            f"the service recorded in {data_dir / SERVICE_FILE} (pid {recorded.pid}) is not running"
        )
    else:
        why = f"no running `tracestore serve` is recorded in {data_dir}"
    raise click.UsageError(
        f"No API token: pass --token or set TRACESTORE_TOKEN ({why}; for a local service, "
        "run this where its tracestore-data directory is, or set TRACESTORE_DATA_DIR)."
    )


_GIVEN_URL = "tracestore.given_url"


def given_url() -> str | None:
    """The --url given on the command line of the running command (hints repeat it)."""
    context = click.get_current_context(silent=True)
    return context.meta.get(_GIVEN_URL) if context is not None else None


def retry_policy() -> RetryPolicy:
    """The client's retries, saying when they wait; ``TRACESTORE_RETRY_SECONDS`` (default
    60) is how long a command keeps retrying a service that fails or cannot be reached
    (a few seconds, for one that has not answered: ``RetryPolicy.unreached_patience``)."""
    from tracestore.client import RetryPolicy

    given = os.environ.get("TRACESTORE_RETRY_SECONDS")
    try:
        patience = float(given) if given else RetryPolicy.patience
    except ValueError:
        raise click.UsageError(f"TRACESTORE_RETRY_SECONDS={given!r} is not a number") from None
    return RetryPolicy(patience=patience, on_wait=waiting_notice())


def recorded_running(url: str) -> bool:
    """Whether ``url`` is the `tracestore serve` recorded as running in the data directory:
    a service known to be there (restarting, if it refuses connections)."""
    recorded = read_service(default_data_dir())
    return recorded is not None and recorded.is_running() and same_service(url, recorded.url)


def connection(command: F) -> F:
    """Adds --url and --token and turns them into a ``Client`` passed as ``client``."""
    return connection_unless(None)(command)


def connection_unless(local: Callable[..., bool] | None) -> Callable[[F], F]:
    """``connection``, except that when ``local(**kwargs)`` holds the command runs with
    ``client`` None and no service is looked for (``compare`` of two local paths)."""
    return functools.partial(_connected, local=local)


def _connected(command: F, local: Callable[..., bool] | None) -> F:

    @click.option(
        "--url",
        envvar="TRACESTORE_URL",
        default=None,
        help="Service URL (or TRACESTORE_URL; default: the `tracestore serve` running on "
        f"this data directory, else {DEFAULT_URL}).",
    )
    @click.option("--token", envvar="TRACESTORE_TOKEN", help="API token (or TRACESTORE_TOKEN).")
    @functools.wraps(command)
    def wrapper(url: str | None, token: str | None, **kwargs: Any) -> Any:
        if local is not None and local(**kwargs):
            return command(client=None, **kwargs)
        context = click.get_current_context()
        if context.get_parameter_source("url") == ParameterSource.COMMANDLINE:
            context.meta[_GIVEN_URL] = url
        # Tests hand in an httpx client on the app in-process: ``main(obj={"http": ...})``.
        http = context_value("http")
        url, token = resolve_connection(url, token)
        with lasting_imports():
            from tracestore.client import Client

        try:
            client = Client(
                url, token, http=http, retry=retry_policy(), reached=recorded_running(url)
            )
        except ValueError as exc:  # a URL that cannot name a service
            raise click.UsageError(f"--url: {exc}") from None
        with client:
            try:
                return command(client=client, **kwargs)
            except TracestoreError as exc:
                for line in error_lines(exc, given_url(), context.info_name):
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
    from tracestore.client.local_files import collect_files
    from tracestore.inspect import inspect_path, rank_census
    from tracestore.inspect.census import upload_problems

    try:
        files = [
            (f.name, inspect_path(f.path, f.name, quick=True))
            for f in collect_files(paths, "primary")
        ]
        census = rank_census(files, declared_rank_count=declared, workload_metadata=metadata)
    except Exception as exc:  # an inspection bug must never stop an upload
        return [f"the local inspection failed ({type(exc).__name__}: {exc}); not checked"]
    return upload_problems(census)


def promotion_problems(metadata: Any, declared: int | None) -> list[str]:
    """What promotion's typed model will refuse in an upload's workloadMetadata: upload
    stores every member as given (the seed), so the CLI says so before sending."""
    from tracestore import metadata as rules

    refusal = rules.promotion_refusal(metadata, declared)
    return [refusal] if refusal else []
