"""The commands on one stored traceset, named by its id: show, edit, analysis, promote,
download, validate, rm (``upload`` and ``ls`` have modules of their own).

They talk to a service over HTTP through ``tracestore.Client`` and import nothing of the
server. Exit codes: 0 success, 1 API or network error (or a failed check), 2 usage error,
130 an interrupted download.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import (
    EXIT_API_ERROR,
    EXIT_INTERRUPTED,
    connection,
    json_option,
    read_metadata,
)
from tracestore.cli.output import (
    echo_json,
    echo_shown,
    progress_bars,
    traceset_text,
    validate_text,
    wire,
)
from tracestore.errors import ValidationError

if TYPE_CHECKING:  # the client (httpx, pydantic) loads when a command runs, not at start
    from tracestore.client import Client


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
    show,
    edit,
    analysis,
    promote,
    download,
    validate,
    rm,
)
