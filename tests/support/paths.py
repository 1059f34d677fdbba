"""Where things are: the repository, its trace samples, and the base URL of in-process tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Real public trace samples, carried by the repository (tests/data/SOURCES.md says whence).
TESTDATA = REPO / "tests" / "data"
# The web tests write the page's screenshots here, for docs/web.md.
SCREENSHOTS = REPO / "docs" / "screenshots"

# Where in-process tests reach the app (TestClient's Host): the base of its presigned URLs.
TEST_BASE = "http://testserver"
