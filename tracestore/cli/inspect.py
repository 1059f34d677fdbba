"""``tracestore inspect``: read local trace files as the service would, before an upload."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import json_option, read_metadata
from tracestore.cli.output import echo_json, echo_shown, table
from tracestore.errors import ValidationError

if TYPE_CHECKING:  # the inspectors load when the command runs, not at start
    from tracestore.inspect import FileInspection, RankCensus


@click.command("inspect")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--workload-metadata",
    "metadata_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The metadata you would upload with; its rank count and degrees are checked.",
)
@click.option(
    "--quick", is_flag=True, help="Read only what names each file's rank (fast on huge traces)."
)
@click.option(
    "--strict", is_flag=True, help="Exit 1 when the rank census or parallelism check fails."
)
@json_option
def inspect_command(
    paths: tuple[Path, ...], metadata_file: Path | None, quick: bool, strict: bool, as_json: bool
) -> None:
    """Inspect trace files and directories locally: each file's format, rank and
    collectives, and the rank census of the set (missing, duplicated, unranked ranks)."""
    from tracestore import metadata
    from tracestore.client.local_files import collect_files
    from tracestore.inspect import inspect_path, rank_census

    workload_metadata = read_metadata(metadata_file)
    try:
        declared = metadata.declared_rank_count(workload_metadata)
        files = collect_files(paths, "primary")
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from None
    found = [(f.name, inspect_path(f.path, f.name, quick=quick)) for f in files]
    census = rank_census(found, declared_rank_count=declared, workload_metadata=workload_metadata)
    if as_json:
        echo_json({"files": [result.to_json() for _, result in found], "census": census.to_json()})
    else:
        click.echo(table(HEADERS, [_row(result) for _, result in found]))
        click.echo("")
        for line in census_lines(census):
            echo_shown(line)
    checks = (census.rank_count_matches, census.parallelism_consistent, census.process_groups_match)
    if strict and not all(check.passed for check in checks):
        sys.exit(1)


HEADERS = ("file", "format", "rank", "rank from", "world", "collectives", "status")
MAX_PROVENANCE_LINES = 20


def _row(result: FileInspection) -> list[str]:
    kind = result.format + (f"+{result.compression}" if result.compression else "")
    if result.members:
        kind += f" ({len(result.members)} members)"
        ranks = sorted({m.rank for m in result.members if m.rank is not None})
        rank = ranges_text(ranks) if ranks else "-"
        source = "members" if ranks else "-"
    else:
        rank = "-" if result.rank is None else str(result.rank)
        source = result.rank_source or "-"
    collectives = ", ".join(
        f"{name} ×{count}" for name, count in sorted(result.collectives.items())
    )
    status = result.status if result.reason is None else f"{result.status}: {result.reason}"
    world = "-" if result.world_size is None else str(result.world_size)
    return [result.name, kind, rank, source, world, collectives or "-", status]


def ranges_text(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2, 5``."""
    spans: list[str] = []
    start = previous = None
    for rank in ranks:
        if start is None:
            start = previous = rank
        elif previous is not None and rank == previous + 1:
            previous = rank
        else:
            spans.append(_span(start, previous))
            start = previous = rank
    if start is not None:
        spans.append(_span(start, previous))
    return ", ".join(spans)


def _span(start: int, end: int | None) -> str:
    return str(start) if end in (None, start) else f"{start}-{end}"


def census_lines(census: RankCensus) -> list[str]:
    """The census as text: ranks found and missing, halves, where each rank comes from,
    the checks."""
    data: dict[str, Any] = census.to_json()
    lines = [f"ranks found: {ranges_text(census.ranks_found) or 'none'}"]
    by_halves: dict[tuple[str, ...], list[int]] = {}
    for entry in census.ranks:
        by_halves.setdefault(entry.halves, []).append(entry.rank)
    if len(by_halves) > 1 or any(len(halves) > 1 for halves in by_halves):
        for halves, ranks in sorted(by_halves.items()):
            lines.append(f"ranks {ranges_text(ranks)}: {' + '.join(halves)}")
    if census.ranks_missing:
        missing = ", ".join(_span(r.start, r.end) for r in census.ranks_missing)
        lines.append(f"ranks missing: {missing} ({census.missing_count})")
    for entry in data["duplicatedRanks"]:
        lines.append(f"rank {entry['rank']} in several files: {', '.join(entry['files'])}")
    if census.unranked_files:
        lines.append(f"files with no rank: {', '.join(census.unranked_files)}")
    told = [(name, text) for name, text in census.rank_provenance.items() if text]
    if told:
        lines.append("where each rank comes from:")
        lines += [f"  {name}: {text}" for name, text in told[:MAX_PROVENANCE_LINES]]
        if len(told) > MAX_PROVENANCE_LINES:
            lines.append(f"  and {len(told) - MAX_PROVENANCE_LINES} more (--json lists all)")
    for name, check in (
        ("rank census", census.rank_count_matches),
        ("parallelism", census.parallelism_consistent),
        ("process groups", census.process_groups_match),
    ):
        mark = "FAILED" if not check.passed else "warning" if check.warning else "ok"
        lines.append(f"{mark} {name}: {check.message}")
    return lines
