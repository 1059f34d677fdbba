"""How fast the command line starts, against the interpreter's own start, in one run.

    .venv/bin/python bench/cli_start.py              # 20 runs of each, medians
    .venv/bin/python bench/cli_start.py --runs 50

Each command is run as a fresh process, as from a shell (the installed ``tracestore``
script beside this interpreter): ``tracestore --version``, ``tracestore ls --help`` and
``tracestore --help``; the baselines are ``python -c pass`` (the floor no command can beat)
and ``python -c "import click"`` (the floor of a click program), all run round-robin.
Prints each median, its ratio to both floors (the machine's noise moves the milliseconds,
the ratios less), whether it meets the 150 ms target (issue 16), and the slowest imports of
``import tracestore.cli`` from ``python -X importtime``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.150


def median_seconds(commands: dict[str, list[str]], runs: int) -> dict[str, float]:
    """The median wall time of each command, run round-robin (after one warm-up each) so
    that the machine's noise falls on every command alike."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    for _ in range(runs):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def slowest_imports(count: int) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time under ``import tracestore.cli``."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import tracestore.cli"],
        check=True,
        capture_output=True,
        text=True,
    ).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((name.strip(), int(cumulative) / 1e6))
    return sorted(rows, key=lambda r: r[1], reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("tracestore")
    if not script.exists():
        raise SystemExit(f"no {script}: install tracestore into this interpreter's venv first")
    python = [sys.executable]
    cases = {
        "python -c pass": [*python, "-c", "pass"],
        'python -c "import click"': [*python, "-c", "import click"],
        "tracestore --version": [str(script), "--version"],
        "tracestore ls --help": [str(script), "ls", "--help"],
        "tracestore --help": [str(script), "--help"],
    }
    medians = median_seconds(cases, args.runs)
    floor = medians["python -c pass"]
    click_floor = medians['python -c "import click"']
    results = []
    for name, seconds in medians.items():
        result: dict[str, object] = {
            "command": name,
            "median_s": round(seconds, 4),
            "ratio": round(seconds / floor, 2),
            "ratio_to_click": round(seconds / click_floor, 2),
        }
        if name.startswith("tracestore"):
            result["target_s"] = TARGET_S
            result["meets_target"] = seconds <= TARGET_S
        results.append(result)
        print(
            f"{name:28} {seconds * 1000:6.1f} ms  ({seconds / floor:.2f} x python -c pass, "
            f"{seconds / click_floor:.2f} x import click)"
        )
    top = slowest_imports(8)
    print("slowest imports under `import tracestore.cli` (cumulative):")
    for module, seconds in top:
        print(f"  {seconds * 1000:6.1f} ms  {module}")
    print(json.dumps({"runs": args.runs, "results": results, "slowest_imports": top}, indent=2))


if __name__ == "__main__":
    main()
