"""``tracestore analyze``: where each rank's GPU time went, from local Kineto files."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracestore.cli.common import json_option
from tracestore.cli.output import echo_json, shown, table
from tracestore.readahead import walk_files

if TYPE_CHECKING:  # the analysis loads when the command runs, not at start
    from tracestore.analysis import AnalysedRank

HEADERS = ("rank", "file", "compute %", "non-compute %", "idle %", "overlap %", "median step")
KERNEL_HEADERS = ("kind", "calls", "total", "mean", "share", "kernel")
NAME_WIDTH = 100
OTHERS = "others"  # a rank's row of the kernels past its 100th (analysis.model.OTHERS)


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
    # schemas.format_timestamp's form, without loading pydantic for it
    when = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    answer = traceset_json(ranks, KERNEL_ROWS, failed=failed, analyzed_at=when)
    if as_json:
        echo_json(answer)
    elif ranks:
        for line in report_lines(answer, top, failures=False):  # named on stderr already
            click.echo(line)
    if problems:
        sys.exit(1)


def report_lines(answer: dict[str, Any], top: int, *, failures: bool = True) -> list[str]:
    """The per-rank table, the summary line and the top kernels over all ranks, from the
    API's object (``tracestore analyze --json``'s, the service's analysis route's); then,
    with ``failures``, a line per file that could not be analysed."""
    entries = answer.get("ranks") or []
    analysed = [entry for entry in entries if entry.get("status") == "complete"]
    rows = []
    for entry in analysed:
        temporal = entry.get("temporal") or {}
        rows.append(
            [
                "-" if entry["rank"] is None else str(entry["rank"]),
                entry["file"],
                _pct(temporal.get("computePct")),
                _pct(temporal.get("nonComputePct")),
                _pct(temporal.get("idlePct")),
                _pct((entry.get("overlap") or {}).get("pct")),
                _duration(_median_step_us(entry.get("steps") or []), 1000),
            ]
        )
    lines = [table(HEADERS, rows)] if rows else []
    summary = answer.get("summary")
    if len(analysed) > 1 and summary:
        lines += ["", _summary_line(summary), *_straggler_lines(summary)]
    if top and analysed:
        lines += ["", *_kernel_lines(analysed, top)]
    failed = [entry for entry in entries if entry.get("status") == "failed"]
    if failures and failed:
        lines += [*([""] if lines else []), "not analysed:"]
        for entry in failed:
            rank = "" if entry["rank"] is None else f" (rank {entry['rank']})"
            lines.append(shown(f"  {entry['file']}{rank}: {entry.get('reason')}"))
    return lines


def _median_step_us(steps: list[dict[str, Any]]) -> float | None:
    """The median duration of the steps, a truncated last step left out."""
    durations: list[float] = sorted(
        step["durationUs"] for step in steps if not step.get("truncated")
    )
    if not durations:
        return None
    middle = len(durations) // 2
    if len(durations) % 2:
        return durations[middle]
    return (durations[middle - 1] + durations[middle]) / 2


def _summary_line(data: dict[str, Any]) -> str:
    parts = []
    for key, label in (
        ("computePct", "compute"),
        ("nonComputePct", "non-compute"),
        ("idlePct", "idle"),
        ("overlapPct", "overlap"),
    ):
        spread = data[key]
        if spread["median"] is not None:
            parts.append(f"{label} {spread['median']} % ({spread['min']}-{spread['max']})")
    line = f"median over {data['rankCount']} ranks: " + ", ".join(parts)
    if data["slowestRank"] is not None:
        line += f"; slowest rank {data['slowestRank']}, fastest {data['fastestRank']}"
    return line


def _straggler_lines(data: dict[str, Any]) -> list[str]:
    """The stragglers, worst first, each with its reason (none: one line saying so)."""
    if "stragglers" not in data:  # an analysis stored before the service looked for them
        return []
    if not data["stragglers"]:
        return ["no straggler"]
    return [shown(f"straggler: {entry['reason']}") for entry in data["stragglers"]]


def _kernel_lines(entries: list[dict[str, Any]], top: int) -> list[str]:
    """The kernels that took the most time over the ranks' rows (each rank's ``others`` row
    counts for the shares, not as a kernel)."""
    calls: dict[tuple[str | None, str], int] = {}
    times: dict[tuple[str | None, str], float] = {}
    total = 0.0
    for entry in entries:
        for row in entry.get("kernels") or []:
            total += row["sumUs"]
            if row["name"] == OTHERS:
                continue
            key = (row["kind"], row["name"])
            calls[key] = calls.get(key, 0) + row["count"]
            times[key] = times.get(key, 0) + row["sumUs"]
    chosen = sorted(times, key=lambda key: (-times[key], key[1]))[:top]
    if not chosen:
        return []
    where = "over all ranks" if len(entries) > 1 else f"of {entries[0]['file']}"
    body = [
        [
            kind or "-",
            str(calls[(kind, name)]),
            _duration(times[(kind, name)], 1000),
            _duration(times[(kind, name)] / calls[(kind, name)], 1000),
            f"{100 * times[(kind, name)] / total:.1f} %" if total else "-",
            _short(name),
        ]
        for kind, name in chosen
    ]
    return [f"top kernels by total time, {where}:", table(KERNEL_HEADERS, body)]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _duration(value: float | None, scale: int = 1) -> str:
    """A duration of ``value`` times ``scale`` nanoseconds."""
    if value is None:
        return "-"
    ns = value * scale
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.3f} µs"


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
