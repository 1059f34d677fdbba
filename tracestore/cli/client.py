"""The client commands of ``tracestore``: upload, ls, show, analysis, promote, download,
validate, rm.

They talk to a service over HTTP through ``tracestore.Client`` and import nothing of the
server. Exit codes: 0 success, 1 API or network error, 2 usage error (bad options, missing
files, metadata that breaks the upload rules before anything is sent).
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

from tracestore.choices import CENSUS_VERDICTS, SCOPES, STATUSES
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
    list_rows,
    progress_bars,
    size_text,
    timestamp,
    traceset_text,
    validate_text,
    wire,
)
from tracestore.errors import UploadIncomplete, ValidationError

if TYPE_CHECKING:  # the client (httpx, pydantic) loads when a command runs, not at start
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


def _parse_filters(pairs: Sequence[str], option: str = "--filter") -> dict[str, Any]:
    workload: dict[str, Any] = {}
    for pair in pairs:
        path, sep, value = pair.partition("=")
        if not sep or not path:
            what = "FACT=VALUE" if option == "--inspected" else "PATH=VALUE"
            raise click.BadParameter(f"{pair!r} is not {what}", param_hint=option)
        workload[path] = value
    return workload


@click.command("ls")
@click.option("--workspace", "workspace_id", help="Only this workspace (and what it sees).")
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--scope", type=click.Choice(SCOPES))
@click.option(
    "--census",
    type=click.Choice(CENSUS_VERDICTS),
    help="The rank census's verdict: fail lists the incomplete tracesets (ranks missing ...).",
)
@click.option("--search", help="Case-insensitive substring of the name.")
@click.option(
    "--sort", help="e.g. created:desc or name:asc,size:desc; step_time:desc (slowest first)."
)
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (all by default).")
@click.option("--workload-family", help="workload_family equals this.")
@click.option("--workload-name", help="workload_name equals this.")
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="PATH=VALUE",
    help="Workload filter on a snake_case path, e.g. shape.global_batch_size=1024; repeatable.",
)
@click.option(
    "--inspected",
    "inspected",
    multiple=True,
    metavar="FACT=VALUE",
    help="A fact inspection derived: gpu_model, backend, format, nccl_version or world_size, "
    "e.g. gpu_model=H100; repeatable.",
)
@click.option("--min-world-size", type=click.IntRange(min=0), help="Inspected world size ≥ this.")
@click.option("--max-world-size", type=click.IntRange(min=0), help="Inspected world size ≤ this.")
@click.option(
    "--min-idle-pct", type=click.FloatRange(0, 100), help="Analysis: median rank's idle % ≥ this."
)
@click.option(
    "--max-idle-pct", type=click.FloatRange(0, 100), help="Analysis: median rank's idle % ≤ this."
)
@click.option(
    "--min-overlap-pct",
    type=click.FloatRange(0, 100),
    help="Analysis: median communication overlap % ≥ this.",
)
@click.option(
    "--uploaded-by",
    metavar="USER",
    help="Only those this user uploaded: a user id (see `show`) or `me`.",
)
@click.option(
    "--tag", "tags", multiple=True, help="Only those holding this exact tag; repeatable (all)."
)
@json_option
@connection
def ls(
    client: Client,
    workspace_id: str | None,
    status: str | None,
    scope: str | None,
    census: str | None,
    search: str | None,
    sort: str | None,
    limit: int | None,
    workload_family: str | None,
    workload_name: str | None,
    filters: tuple[str, ...],
    inspected: tuple[str, ...],
    min_world_size: int | None,
    max_world_size: int | None,
    min_idle_pct: float | None,
    max_idle_pct: float | None,
    min_overlap_pct: float | None,
    uploaded_by: str | None,
    tags: tuple[str, ...],
    as_json: bool,
) -> None:
    """List tracesets you can see, newest first (every page, fetched as needed), with who
    uploaded each."""
    workload = _parse_filters(filters)
    if workload_family is not None:
        workload["workload_family"] = workload_family
    if workload_name is not None:
        workload["workload_name"] = workload_name
    items = list(
        client.list_tracesets(
            max_items=limit,
            page_size=min(limit, 100) if limit else 100,
            workspace_id=workspace_id,
            status=status,
            scope=scope,
            census=census,
            search=search,
            sort=sort,
            workload=workload or None,
            inspected=_parse_filters(inspected, "--inspected") or None,
            min_world_size=min_world_size,
            max_world_size=max_world_size,
            min_idle_pct=min_idle_pct,
            max_idle_pct=max_idle_pct,
            min_overlap_pct=min_overlap_pct,
            uploaded_by=uploaded_by,
            tags=list(tags) or None,
        )
    )
    if as_json:
        echo_json([wire(item) for item in items])
    elif items:
        click.echo(list_rows(items))
    else:
        click.echo("No tracesets.", err=True)


@click.command()
@click.argument("traceset_id")
@json_option
@connection
def show(client: Client, traceset_id: str, as_json: bool) -> None:
    """Show a traceset: status, rank count, workload metadata and files."""
    traceset = client.get_traceset(traceset_id)
    if as_json:
        echo_json(wire(traceset))
    else:
        click.echo(traceset_text(traceset))


@click.command()
@click.argument("traceset_id")
@click.option("--name", help="The new name.")
@click.option("--description", help="The new description.")
@click.option("--no-description", is_flag=True, help="Remove the description.")
@click.option("--tag", "tags", multiple=True, help="Add this tag; repeatable.")
@click.option("--untag", "untags", multiple=True, help="Remove this tag; repeatable.")
@click.option("--clear-tags", is_flag=True, help="Remove every tag (before any --tag).")
@json_option
@connection
def edit(
    client: Client,
    traceset_id: str,
    name: str | None,
    description: str | None,
    no_description: bool,
    tags: tuple[str, ...],
    untags: tuple[str, ...],
    clear_tags: bool,
    as_json: bool,
) -> None:
    """Change a traceset's name, description or tags: its uploader or a tenant admin. What
    is not given is kept; the edit is recorded (shown by `show`)."""
    if description is not None and no_description:
        raise click.UsageError("Give --description or --no-description, not both")
    if clear_tags and untags:
        raise click.UsageError("Give --clear-tags or --untag, not both")
    if (
        name is None
        and description is None
        and not (no_description or tags or untags or clear_tags)
    ):
        raise click.UsageError(
            "Nothing to change: give --name, --description, --no-description, --tag, --untag "
            "or --clear-tags"
        )
    edits: dict[str, Any] = {}
    if description is not None or no_description:
        edits["description"] = description
    if clear_tags:
        edits["tags"] = list(tags)
    else:
        edits["add_tags"] = list(tags) or None
        edits["remove_tags"] = list(untags) or None
    traceset = client.edit_traceset(traceset_id, name=name, **edits)
    if as_json:
        echo_json(wire(traceset))
    else:
        click.echo(traceset_text(traceset))


@click.command("analysis")
@click.argument("traceset_id")
@click.option("--ranks", help="Only these ranks' files, e.g. 0-7,12.")
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(min=0), help="Kernels listed."
)
@json_option
@connection
def analysis(client: Client, traceset_id: str, ranks: str | None, top: int, as_json: bool) -> None:
    """Show where each rank's GPU time went in a stored traceset, as `tracestore analyze`
    shows local files: per rank the share of compute, non-compute and idle time, overlap,
    median step time; the summary; the top kernels. --json prints the service's object.
    Exits 1 when a file could not be analysed (each is named with why)."""
    from tracestore.cli.analyze import report_lines

    answer = client.get_analysis(traceset_id, ranks=ranks)
    data = answer.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if as_json:
        echo_json(data)
    elif answer.status == "pending":
        done = len(answer.ranks)
        echo_shown(f"pending: the analysis is still running ({done} of its files read so far)")
    elif answer.status in ("none", "failed"):
        echo_shown(f"{answer.status}: {answer.reason}")
    for line in [] if as_json or answer.status == "none" else report_lines(data, top):
        click.echo(line)
    if answer.status == "failed" or any(r.status == "failed" for r in answer.ranks):
        sys.exit(EXIT_API_ERROR)


@click.command()
@click.argument("traceset_id")
@click.option(
    "--target", type=click.Choice(["tenant", "public"]), default="tenant", show_default=True
)
@click.option(
    "--workload-metadata",
    "metadata_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Replace the workloadMetadata (same rank count as at upload).",
)
@click.option("--description", help="Replace the description.")
@click.option("--tag", "tags", multiple=True, help="Replace the tags; repeatable.")
@click.option(
    "--force",
    is_flag=True,
    help="Promote even though the traceset fails its census (see `tracestore validate`).",
)
@json_option
@connection
def promote(
    client: Client,
    traceset_id: str,
    target: str,
    metadata_file: Path | None,
    description: str | None,
    tags: tuple[str, ...],
    force: bool,
    as_json: bool,
) -> None:
    """Widen who can see a ready traceset: workspace → tenant → public. A promoted traceset
    no longer expires; one that fails its census is refused unless --force."""
    answer = client.promote_traceset(
        traceset_id,
        target=target,
        workload_metadata=read_metadata(metadata_file),
        description=description,
        tags=list(tags) if tags else None,
        force=force,
    )
    if as_json:
        echo_json(wire(answer))
    elif answer.promotion_applied:
        echo_shown(f"{answer.id} promoted to {answer.scope}")
    else:
        echo_shown(f"{answer.id} is already {answer.scope}; nothing changed")


@click.command()
@click.argument("traceset_id")
@click.option("--file", "names", multiple=True, help="Only this file; repeatable.")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory to write into.",
)
@click.option("--concurrency", type=click.IntRange(1, 32), default=4, show_default=True)
@click.option("--ranks", help="Only the files holding these ranks, e.g. 0-7,12.")
@click.option("--supporting", is_flag=True, help="With --ranks: the supporting files too.")
@json_option
@connection
def download(
    client: Client,
    traceset_id: str,
    names: tuple[str, ...],
    output: Path,
    concurrency: int,
    ranks: str | None,
    supporting: bool,
    as_json: bool,
) -> None:
    """Download a traceset's files (resumes partial files, verifies every SHA-256)."""
    if ranks is not None and names:
        raise click.UsageError("Give --file or --ranks, not both")
    if supporting and ranks is None:
        raise click.UsageError("--supporting goes with --ranks")
    traceset = client.get_traceset(traceset_id)
    if ranks is not None:
        from tracestore.ranks import parse_ranks, sent_whole

        try:
            runs = parse_ranks(ranks)
        except ValidationError as exc:
            raise click.BadParameter(exc.message, param_hint="--ranks") from None
        held = [
            (
                f.name,
                f.role,
                *((f.rank_range.start, f.rank_range.end) if f.rank_range else (None, None)),
            )
            for f in traceset.files
        ]
        for name, whole in sent_whole(held, runs):
            echo_shown(
                f"Note: {name} holds ranks {whole} and comes whole: a file is not split by rank",
                err=True,
            )
    try:
        with progress_bars() as report:
            written = client.download_traceset(
                traceset_id,
                output,
                files=list(names) or None,
                concurrency=concurrency,
                progress=report.progress,
                ranks=ranks,
                supporting=supporting,
                traceset=traceset,
            )
    except KeyboardInterrupt:
        click.echo("\nInterrupted; run the same command again to resume.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if as_json:
        echo_json([str(path) for path in written])
    else:
        for path in written:
            echo_shown(path)


@click.command()
@click.argument("traceset_id")
@json_option
@connection
def validate(client: Client, traceset_id: str, as_json: bool) -> None:
    """Re-verify a traceset on the service; exit 1 when a check of the traceset fails (a
    tool it is not ready for is said apart, and is no failure)."""
    answer = client.validate_traceset(traceset_id)
    if as_json:
        echo_json(wire(answer))
    else:
        click.echo("\n".join(validate_text(traceset_id, answer)))
    if not answer.valid:
        sys.exit(EXIT_API_ERROR)


@click.command()
@click.argument("traceset_id")
@json_option
@connection
def rm(client: Client, traceset_id: str, as_json: bool) -> None:
    """Delete a traceset (soft: its bytes are purged after a grace period)."""
    client.delete_traceset(traceset_id)
    if as_json:
        echo_json({"id": traceset_id, "status": "deleted"})
    else:
        echo_shown(f"deleted {traceset_id}")


COMMANDS: tuple[click.Command, ...] = (
    upload,
    ls,
    show,
    edit,
    analysis,
    promote,
    download,
    validate,
    rm,
)
