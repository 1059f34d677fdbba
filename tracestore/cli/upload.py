"""The ``upload`` command: files and directories sent as one traceset, checked locally
first, hashed ahead while the client loads, resumable when it stops.

Exit codes: 0 success, 1 API or network error (or a local check refused under
``--strict``), 2 usage error (bad options, missing files, metadata that breaks the upload
rules before anything is sent), 130 interrupted (the message says how to resume).
"""

from __future__ import annotations

import functools
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import (
    EXIT_API_ERROR,
    EXIT_INTERRUPTED,
    F,
    census_problems,
    connection,
    given_url,
    json_option,
    promotion_problems,
    read_metadata,
)
from tracestore.cli.output import (
    echo_json,
    echo_shown,
    error_lines,
    progress_bars,
    size_text,
    timestamp,
    wire,
)
from tracestore.errors import UploadIncomplete, ValidationError

if TYPE_CHECKING:  # the client (httpx, pydantic) loads when the command runs, not at start
    from tracestore.client import Client
    from tracestore.readahead import ReadAhead
    from tracestore.schemas import UploadUrlResponse


def reading_ahead(command: F) -> F:
    """Starts hashing the files to upload on a thread of their own (``ReadAhead``) before
    ``connection`` imports the client, the command's slow start; the command gets it as
    ``read_ahead``."""

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        from tracestore.readahead import ReadAhead

        with ReadAhead([*kwargs["paths"], *kwargs["supporting"]]) as read_ahead:
            return command(read_ahead=read_ahead, **kwargs)

    return wrapper  # type: ignore[return-value]


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--workload-metadata",
    "metadata_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON file with the workloadMetadata (must declare the rank count for primary files).",
)
@click.option("--name", help="Traceset name (default: the first path's base name).")
@click.option(
    "--supporting",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="A supporting file or directory (configs, logs); repeatable.",
)
@click.option("--role", type=click.Choice(["primary", "supporting"]), default="primary")
@click.option("--workspace", "workspace_id", help="Workspace id (default: yours).")
@click.option("--tag", "tags", multiple=True, help="A tag; repeatable.")
@click.option("--ttl-days", type=click.IntRange(1, 365), help="Days unused before it expires.")
@click.option("--description", help="Free text.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--resume", "resume_id", metavar="UPLOAD_ID", help="Finish an interrupted upload.")
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse (do not just warn) when a local inspection of the files disagrees with the "
    "declared rank count, or promotion would refuse the metadata.",
)
@json_option
@reading_ahead
@connection
def upload(
    client: Client,
    paths: tuple[Path, ...],
    metadata_file: Path | None,
    name: str | None,
    supporting: tuple[Path, ...],
    role: str,
    workspace_id: str | None,
    tags: tuple[str, ...],
    ttl_days: int | None,
    description: str | None,
    concurrency: int,
    resume_id: str | None,
    strict: bool,
    as_json: bool,
    read_ahead: ReadAhead,
) -> None:
    """Upload files and directories as one traceset (parallel, resumable, verified)."""
    from tracestore import metadata as rules
    from tracestore.client import MetadataWarning
    from tracestore.client.transfers import UploadInterrupted

    workload_metadata = read_metadata(metadata_file)
    if resume_id is None:
        meant = rules.near_misses(workload_metadata)
        try:
            declared = rules.check_upload_metadata(
                workload_metadata, has_primary_files=role == "primary"
            )
        except ValidationError as exc:
            hint = f" ({'; '.join(meant)})" if meant else ""
            raise click.UsageError(
                f"{metadata_file or 'no --workload-metadata'}: {exc}{hint}"
            ) from None
        for hint in meant:
            echo_shown(f"Warning: {hint}", err=True)
        problems = promotion_problems(workload_metadata, declared)
        problems += census_problems(paths, role, workload_metadata, declared)
        for problem in problems:
            echo_shown(f"{'Error' if strict else 'Warning'}: {problem}", err=True)
        if problems and strict:  # a data problem, not a usage one: exit 1, as inspect does
            click.echo(
                "Error: not uploaded: the local checks disagree with the metadata (--strict); "
                "fix the files or the metadata, or upload without --strict",
                err=True,
            )
            sys.exit(EXIT_API_ERROR)

    try:
        with progress_bars() as report:

            def started(session: UploadUrlResponse) -> None:
                report.note(
                    f"Uploading {session.traceset_id} as {session.upload_id}; if this stops: "
                    + _resume_hint(session.upload_id, paths, supporting)
                )

            with warnings.catch_warnings():  # said above, before sending
                warnings.simplefilter("ignore", MetadataWarning)
                traceset = client.upload_traceset(
                    list(paths),
                    name=name,
                    workload_metadata=workload_metadata,
                    role=role,  # type: ignore[arg-type]
                    supporting=list(supporting),
                    workspace_id=workspace_id,
                    tags=tags,
                    ttl_days=ttl_days,
                    description=description,
                    concurrency=concurrency,
                    progress=report.progress,
                    resume_upload_id=resume_id,
                    on_started=started,
                    read_ahead=read_ahead,
                )
    except UploadInterrupted as exc:
        click.echo(f"\nInterrupted; {_resume_hint(exc.upload_id, paths, supporting)}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except UploadIncomplete as exc:
        for line in error_lines(exc, given_url()):
            click.echo(line, err=True)
        click.echo(f"  {_resume_hint(exc.upload_id, paths, supporting)}", err=True)
        sys.exit(EXIT_API_ERROR)
    except ValidationError as exc:
        if exc.request_id is None:  # found locally, before any request
            raise click.UsageError(exc.message) from None
        raise
    if as_json:
        echo_json(wire(traceset))
    else:
        echo_shown(
            f"{traceset.id}  {traceset.status}  {traceset.file_count} files  "
            f"{size_text(traceset.total_size)}  {traceset.hash}"
        )
        if traceset.expires_at is not None:  # said at once: it goes unless used or promoted
            url = given_url()
            keep = ["tracestore", "promote", *(["--url", url] if url else []), traceset.id]
            echo_shown(
                f"{traceset.id} expires {timestamp(traceset.expires_at)}, {traceset.ttl_days} "
                f"days after its last use (a download counts); keep it: {shlex.join(keep)}"
            )
        else:  # a resumed upload whose traceset was promoted meanwhile
            echo_shown(f"{traceset.id} never expires (promoted)")


def _resume_hint(upload_id: str, paths: Sequence[Path], supporting: Sequence[Path]) -> str:
    url = given_url()
    words = ["tracestore", "upload", *(["--url", url] if url else []), "--resume", upload_id]
    words += map(str, paths)
    for extra in supporting:
        words += ["--supporting", str(extra)]
    return "resume with: " + shlex.join(words)
