"""README's quick tour, run as written (its shell block, curl and all) against a real
``tracestore serve``: the first traceset a newcomer makes passes its own census (issue 43,
item 10: its files were ``{}``, and its census failed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.served import serving

pytestmark = pytest.mark.slow  # a real serve and the CLI as processes

README = Path(__file__).resolve().parents[1] / "README.md"


def tour() -> str:
    """The shell block of the README's quick tour."""
    text = README.read_text()
    section = text[text.index("## A quick tour") :]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "the quick tour has a shell block"
    return match[1]


@pytest.mark.timeout(120)
def test_the_quick_tours_traceset_passes_its_census(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.fail("the quick tour needs curl (Debian's curl package)")
    with serving(tmp_path / "tracestore-data", cwd=tmp_path) as served:
        script = tour().replace("http://127.0.0.1:8000", served.url)
        assert served.url in script  # the tour names the service's address
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PATH": os.environ.get("PATH", "")},
        )
    assert done.returncode == 0, done.stderr
    traceset = json.loads(done.stdout)
    assert traceset["status"] == "ready"
    census = traceset["inspection"]["census"]
    assert census["ranksFound"] == [0, 1]
    for name, check in census["checks"].items():
        assert check["passed"] is True, (name, check)
