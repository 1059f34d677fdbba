"""The ``ls`` command: the tracesets you can see, found by status, scope, census, name,
workload metadata, inspected facts, analysis, uploader and tags.

Exit codes: 0 success (also when nothing matches), 1 API or network error, 2 usage error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from tracestore.choices import CENSUS_VERDICTS, SCOPES, STATUSES
from tracestore.cli.common import connection, json_option
from tracestore.cli.output import echo_json, list_rows, wire

if TYPE_CHECKING:  # the client (httpx, pydantic) loads when the command runs, not at start
    from tracestore.client import Client


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
