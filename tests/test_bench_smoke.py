"""The benchmarks still start: each script answers --help, and the listing and in-process
request benchmarks run a tiny case end to end on SQLite (a merge once left the listing's
building services it could not use, found only when someone ran it). No figure is checked
here: benchmarks measure, tests do not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.engine_independent]  # each starts benchmarks

BENCH = Path(__file__).resolve().parents[1] / "bench"
MODULES = {"served.py", "comparison.py"}  # imported by the scripts, not run
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name not in MODULES)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_benchmark_answers_help(script: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "usage:" in run.stdout


def run_tiny(script: str, tmp_path: Path, *args: str) -> str:
    """``bench/<script>`` with ``args`` in ``tmp_path``; its standard output. Fails the test
    if the script exits non-zero."""
    run = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_the_listing_benchmark_runs_a_tiny_case(tmp_path: Path) -> None:
    run_tiny("list.py", tmp_path, "--count", "20000", "--repeats", "2", "--engines", "sqlite")


def test_the_request_cpu_benchmark_runs_a_tiny_case(tmp_path: Path) -> None:
    # Its upload-url POST answers 200 or the script exits non-zero.
    out = run_tiny(
        "request_cpu.py",
        tmp_path,
        *("--count", "20", "--chunks", "1", "--routes", "get,upload"),
        *("--workdir", str(tmp_path)),
    )
    assert "upload-url, 8 files" in out
    assert "list first page" not in out


def test_the_byte_benchmarks_say_when_freed_memory_goes_back_to_the_host(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import guest
    finally:
        sys.path.remove(str(BENCH))
    assert guest.memory_note(tmp_path / "absent") is None  # a kernel that does not say
    (tmp_path / "min_free_ms").write_text("0\n")
    (tmp_path / "max_waiting_mib").write_text("1024\n")
    note = guest.memory_note(tmp_path)
    assert note is not None and "after 0 ms" in note
    assert f"echo 120000 > {tmp_path}/min_free_ms" in note
    assert f"echo 16384 > {tmp_path}/max_waiting_mib" in note
    (tmp_path / "min_free_ms").write_text("120000\n")
    # Delayed, but a small cap on what may wait still reports most of a run's memory.
    assert "max_waiting_mib" in (guest.memory_note(tmp_path) or "")
    (tmp_path / "max_waiting_mib").write_text("16384\n")
    assert guest.memory_note(tmp_path) is None  # held back: the runs repeat


@pytest.mark.parametrize("serve", [False, True])
def test_the_upload_benchmark_times_the_command_line_against_another_commit(
    tmp_path: Path, serve: bool
) -> None:
    out = run_tiny(
        "upload.py",
        tmp_path,
        *("--cases", "cli-large", "--scale", "0.002", "--repeat", "2"),
        *("--against", "HEAD", "--workdir", str(tmp_path)),
        *(["--serve-against"] if serve else []),
    )
    results = json.loads(out.splitlines()[-1])
    against = results[0]["against"]
    assert against["rev"] == "HEAD" and against["served_by_rev"] is serve
    assert len(against["this_runs_s"]) == len(against["that_runs_s"]) == 2
    assert "HEAD takes" in out
    assert ("each to its tree's server" in out) is serve


@pytest.mark.slow
def test_the_analysis_benchmark_runs_a_tiny_case(tmp_path: Path) -> None:
    # Every contender once on a 2 MiB file, HTA included; the big-file step with a tiny one.
    out = run_tiny(
        "analysis.py",
        tmp_path,
        *("--size-mib", "2", "--rounds", "1", "--big-gib", "0.004", "--no-targets"),
        *("--dir", str(tmp_path)),
    )
    for line in ("tracestore analyze", "json.load", "HTA", "speed vs HTA ≥ 10×", "4 MiB file"):
        assert line in out, out


@pytest.mark.slow
def test_the_comparison_benchmark_runs_a_tiny_case(tmp_path: Path) -> None:
    # Two 2-rank sets through a real service, HTA's TraceDiff once.
    out = run_tiny(
        "analysis.py",
        tmp_path,
        *("--compare", "--ranks", "2", "--rounds", "2", "--hta-rounds", "1"),
        *("--dir", str(tmp_path)),
    )
    for line in (
        "compare through the service (median)",
        "analysing one set (service, median)",
        "HTA TraceDiff.compare_traces",
        "met    compare of two 2-rank sets < 1.0 s",
        "added ['volta_sgemm_128x64_nt'], deleted ['volta_sgemm_128x32_nt']",
    ):
        assert line in out, out
