"""The web page's tests: Debian's Chromium, headless, driven by Playwright against a real
``tracestore serve``. Playwright never downloads a browser here: it launches /usr/bin/chromium
(the README's test command installs Debian's ``chromium`` package when it is missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.replica_processes import fresh_database, postgres  # noqa: F401 - the fixture
from tests.support.served import Served, serving

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium reaches for Google's hosts at every start,
# and this machine's closed network refuses them.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here drives a browser against a real serve: slow (``-m "not slow"``)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium, for one test module: while Playwright's sync API runs, its event loop is
    this thread's running loop, and a later module's ``asyncio.run`` (a pytest-xdist worker
    runs web and other modules in turn) would refuse to start."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium package "
            "(bash scripts/test.sh does it: apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A real ``tracestore serve`` over a fresh data directory. Its token cache is off: the
    page's answer to a token revoked by the admin commands is tested here, how soon such a
    revocation reaches a serving process is tests/test_request_path.py's."""
    with serving(tmp_path / "data", env={"TRACESTORE_TOKEN_CACHE_SECONDS": "0"}) as service:
        yield service


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (its own sessionStorage) and page, 1280×800."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    # Playwright's assertions keep a default of their own (5 s): the same 15 s as the actions,
    # for a page served by a process under coverage on a loaded machine.
    expect.set_options(timeout=15_000)
    yield opened
    context.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """A served database of each engine, for the web tests that run on both: None for
    SQLite (the data directory's), a fresh PostgreSQL database's URL otherwise."""
    if request.param == "sqlite":
        yield None
    else:
        yield fresh_database(request.getfixturevalue("postgres"))
