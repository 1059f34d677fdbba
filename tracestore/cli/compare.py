"""``tracestore compare A B``: what changed between two tracesets, stored or local.

Two traceset ids ask the service (``Client.compare_tracesets``); two local paths (Kineto
files or directories) are analysed here with the pure analysis, as ``tracestore analyze``
does, and compared with the same code the service runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracestore.cli.common import EXIT_API_ERROR, connection_unless, json_option
from tracestore.cli.output import echo_json, echo_shown, shown, table
from tracestore.errors import TracestoreError, ValidationError
from tracestore.readahead import walk_files

KERNEL_HEADERS = ("Δ time", "base", "other", "Δ calls", "kernel")
RANK_HEADERS = ("base", "other", "Δ median step", "Δ compute %", "Δ idle %", "Δ overlap %")
NAME_WIDTH = 100


@click.command("compare")
@click.argument("base")
@click.argument("other")
@click.option("--base-ranks", help="Ranks of BASE to compare, e.g. 0-7 (default: both hold).")
@click.option("--other-ranks", help="Ranks of OTHER, met in order with --base-ranks'.")
@click.option("--steps", help="ProfilerStep numbers whose kernels count, e.g. 3-5.")
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(min=0), help="Kernels listed."
)
@json_option
@connection_unless(lambda base, other, **_: Path(base).exists() or Path(other).exists())
def compare(
    client: Any,
    base: str,
    other: str,
    base_ranks: str | None,
    other_ranks: str | None,
    steps: str | None,
    top: int,
    as_json: bool,
) -> None:
    """Compare two tracesets: BASE and OTHER are two traceset ids on the service, or two
    local Kineto files or directories (analysed here). Lists the kernels whose time changed
    most (slower first), the kernels added and removed, and per rank the change of median
    step time, compute, idle and overlap. --json prints the service's comparison object."""
    local = [Path(base).exists(), Path(other).exists()]
    if all(local):
        answer, problems = _local(Path(base), Path(other), base_ranks, other_ranks, steps)
    elif any(local):
        missing = other if local[0] else base
        raise click.UsageError(
            f"{missing} is no local file or directory: give two traceset ids or two paths"
        )
    else:
        found = client.compare_tracesets(
            base, other, base_ranks=base_ranks, other_ranks=other_ranks, steps=steps
        )
        answer, problems = found.model_dump(mode="json", by_alias=True), 0
    if as_json:
        echo_json(answer)
    else:
        for line in report_lines(answer, top):
            click.echo(line)
    if problems:
        sys.exit(EXIT_API_ERROR)


def _local(
    base: Path, other: Path, base_ranks: str | None, other_ranks: str | None, steps: str | None
) -> tuple[dict[str, Any], int]:
    from tracestore.analysis import analyze_path
    from tracestore.analysis.compare import RankSide, compare_sides, side_of
    from tracestore.ranks import parse_ranks

    try:
        runs = [
            None if text is None else parse_ranks(text, name, unit)
            for text, name, unit in (
                (base_ranks, "--base-ranks", "rank"),
                (other_ranks, "--other-ranks", "rank"),
                (steps, "--steps", "step"),
            )
        ]
    except ValidationError as exc:
        raise click.UsageError(exc.message) from None
    problems = 0
    sides: list[list[RankSide]] = [[], []]
    for side, given in zip(sides, (base, other), strict=True):
        for name, path in walk_files(given):
            outcome = analyze_path(path, name)
            if outcome.rank is None:
                if outcome.kineto:
                    problems += 1
                    echo_shown(f"{name}: {outcome.reason}", err=True)
                continue
            side.append(side_of(outcome.rank.rank, name, outcome.rank.analysis))
        if not side:
            raise click.UsageError(f"{given} holds no Kineto trace that could be analysed")
        side.sort(key=lambda s: (s.rank is None, s.rank or 0, s.file))
    try:
        answer = compare_sides((str(base), sides[0]), (str(other), sides[1]), *runs)
    except TracestoreError as exc:
        echo_shown(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_API_ERROR)
    return answer, problems


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:+,.3f} ms" if abs(value) >= 1000 else f"{value:+,.1f} µs"


def _plain_us(value: float) -> str:
    return f"{value / 1000:,.3f} ms" if abs(value) >= 1000 else f"{value:,.1f} µs"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def report_lines(answer: dict[str, Any], top: int) -> list[str]:
    """The comparison as text (every word from a trace ``shown``): the kernels that changed
    most, the names added and removed, a row per rank pair."""
    base, other = answer["base"], answer["other"]
    lines = [shown(f"base {base['traceset']} → other {other['traceset']}")]
    kernels = answer["kernels"][:top]
    if kernels:
        rows = [
            [
                _us(k["diffDurationUs"]),
                _plain_us(k["baseDurationUs"]),
                _plain_us(k["otherDurationUs"]),
                f"{k['diffCount']:+d}",
                k["name"][:NAME_WIDTH],
            ]
            for k in kernels
        ]
        lines += ["", table(KERNEL_HEADERS, rows)]
    counts = ", ".join(
        f"{len(answer[key])} {key}"
        for key in ("added", "deleted", "increased", "decreased", "unchanged")
    )
    lines += ["", f"kernel names: {counts}"]
    for key, word in (("added", "added"), ("deleted", "removed")):
        for name in answer[key][:top]:
            lines.append(shown(f"  {word}: {name[:NAME_WIDTH]}"))
    rows = []
    for pair in answer["ranks"]:
        diff = pair["diff"]
        rows.append(
            [
                "-" if pair["baseRank"] is None else str(pair["baseRank"]),
                "-" if pair["otherRank"] is None else str(pair["otherRank"]),
                _us(diff["medianStepUs"]),
                _points(diff["temporal"]["computePct"]),
                _points(diff["temporal"]["idlePct"]),
                _points(diff["overlap"]["pct"]),
            ]
        )
    if rows:
        lines += ["", table(RANK_HEADERS, rows)]
    return lines
