"""A clone of the repository tests itself with nothing beside it (issue 41, finding 3).

The tests once read their real trace samples from ``../shared/testdata``, a folder outside the
repository: a bare clone failed at collection. This copies the files git tracks (what a clone
holds, with this checkout's edits) into a folder with nothing beside it, and runs there the
collection of the whole suite and the tests that read the samples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.engine_independent]


def _tracked_copy(destination: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    clone = destination / "clone"
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in this checkout, not yet committed
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return clone


def _pytest(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRACESTORE_")}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=clone,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_bare_copy_collects_every_test_and_reads_its_own_samples(tmp_path: Path) -> None:
    clone = _tracked_copy(tmp_path)
    assert not (tmp_path / "shared").exists()
    assert (clone / "tests" / "data" / "SOURCES.md").is_file()

    imported = subprocess.run(
        [sys.executable, "-c", "import tracestore; print(tracestore.__file__)"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(imported).is_relative_to(clone), imported

    collected = _pytest(clone, "--collect-only")
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "error" not in collected.stdout.splitlines()[-1]

    # The tests that read the samples, run from the copy: they must import the copy's code
    # and find the copy's data.
    ran = _pytest(
        clone,
        "tests/test_inspect_formats.py",
        "tests/test_inspect_census.py",
        "tests/test_inspect_summary.py",
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout.splitlines()[-1]
