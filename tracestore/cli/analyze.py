"""``tracestore analyze``: where each rank's GPU time went, from local Kineto files."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracestore.cli.common import json_option
from tracestore.cli.output import echo_json, table
from tracestore.readahead import walk_files

if TYPE_CHECKING:  # the analysis loads when the command runs, not at start
    from tracestore.analysis import AnalysedRank

HEADERS = ("rank", "file", "compute %", "non-compute %", "idle %", "overlap %", "median step")
KERNEL_HEADERS = ("kind", "calls", "total", "mean", "share", "kernel")
NAME_WIDTH = 100


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(min=0), help="Kernels listed."
)
@json_option
def analyze_command(paths: tuple[Path, ...], top: int, as_json: bool) -> None:
    """Analyse Kineto trace files and directories locally: per rank, the share of GPU time
    spent computing, communicating or copying, and idle; how much communication hides under
    computation; the median step time; and the kernels that take the most time. A file that
    cannot be analysed gets a line on stderr (and exit status 1); the others still answer.
    --json prints the object the service's analysis route answers."""
    from tracestore.analysis import analyze_path, traceset_json
    from tracestore.analysis.model import KERNEL_ROWS

    for path in paths:  # as `inspect` and `upload` take them, without the client's imports
        if not (path.is_dir() or path.is_file()):
            problem = "does not exist" if not path.exists() else "is neither a file nor a directory"
            raise click.UsageError(f"{path} {problem}")
    ranks: list[AnalysedRank] = []
    failed: list[tuple[int | None, str, str]] = []
    problems = 0
    for name, path in (found for given in paths for found in walk_files(given)):
        outcome = analyze_path(path, name)
        if outcome.rank is None:
            problems += 1
            click.echo(f"{name}: {outcome.reason}", err=True)
            if outcome.kineto:
                failed.append((outcome.rank_number, name, outcome.reason or "not analysed"))
        else:
            ranks.append(outcome.rank)
    if as_json:
        # schemas.format_timestamp's form, without loading pydantic for it
        when = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        echo_json(traceset_json(ranks, KERNEL_ROWS, failed=failed, analyzed_at=when))
    elif ranks:
        for line in report_lines(ranks, top):
            click.echo(line)
    if problems:
        sys.exit(1)


def report_lines(ranks: list[AnalysedRank], top: int) -> list[str]:
    """The per-rank table, the summary line and the top kernels over all ranks."""
    from tracestore.analysis import summary

    ordered = sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.file))
    rows = []
    for entry in ordered:
        temporal = entry.analysis.temporal.to_json()
        rows.append(
            [
                "-" if entry.rank is None else str(entry.rank),
                entry.file,
                _pct(temporal["computePct"]),
                _pct(temporal["nonComputePct"]),
                _pct(temporal["idlePct"]),
                _pct(entry.analysis.overlap.pct),
                _duration(entry.analysis.median_step_ns),
            ]
        )
    lines = [table(HEADERS, rows)]
    if len(ordered) > 1:
        lines += ["", _summary_line(summary(ordered))]
    if top:
        lines += ["", *_kernel_lines(ordered, top)]
    return lines


def _summary_line(data: dict[str, object]) -> str:
    parts = []
    for key, label in (
        ("computePct", "compute"),
        ("nonComputePct", "non-compute"),
        ("idlePct", "idle"),
        ("overlapPct", "overlap"),
    ):
        spread = data[key]
        assert isinstance(spread, dict)
        if spread["median"] is not None:
            parts.append(f"{label} {spread['median']} % ({spread['min']}-{spread['max']})")
    line = f"median over {data['rankCount']} ranks: " + ", ".join(parts)
    if data["slowestRank"] is not None:
        line += f"; slowest rank {data['slowestRank']}, fastest {data['fastestRank']}"
    return line


def _kernel_lines(ranks: list[AnalysedRank], top: int) -> list[str]:
    from tracestore.analysis import KernelStats

    merged: dict[tuple[str | None, str], KernelStats] = {}
    for entry in ranks:
        for row in entry.analysis.kernels:
            key = (row.kind, row.name)
            if key not in merged:
                merged[key] = KernelStats(row.name, row.kind)
            merged[key].absorb(row)
    rows = sorted(merged.values(), key=lambda r: (-r.sum_ns, r.name))[:top]
    if not rows:
        return []
    total = sum(r.sum_ns for r in merged.values())
    where = "over all ranks" if len(ranks) > 1 else f"of {ranks[0].file}"
    body = [
        [
            row.kind or "-",
            str(row.count),
            _duration(row.sum_ns),
            _duration(row.sum_ns / row.count),
            f"{100 * row.sum_ns / total:.1f} %" if total else "-",
            _short(row.name),
        ]
        for row in rows
    ]
    return [f"top kernels by total time, {where}:", table(KERNEL_HEADERS, body)]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _duration(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.3f} µs"


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
