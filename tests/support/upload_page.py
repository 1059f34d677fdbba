"""The upload view's test steps (tests/web/test_upload*.py): mount it recording what it
uploaded, make a folder, pick it and press Upload, wait for its session and its end, and
compare what the service stored with the folder byte for byte."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.support.served import Served
from tracestore.client import Client

PARTS = "**/blobs/parts/**"


MOUNT_RECORDING = """async () => {
  const m = await import('/static/upload_view.js');
  window.uploaded = window.uploaded ?? [];
  m.mountUploadView(document.getElementById('app'), {
    onUploaded: (t) => window.uploaded.push(t),
  });
}"""


def mount_recording_view(page: Page) -> None:
    """Mount the upload view into #app again with an ``onUploaded`` that records the traceset
    in ``window.uploaded`` (the router's would open its detail view).

    The router mounts its own view after an asynchronous import; it is waited for first, or
    its mount could land after this one and take the upload over (and then navigate away)."""
    expect(page.get_by_role("heading", name="Upload a traceset")).to_be_visible()
    page.evaluate("window.uploaded = []")
    page.evaluate(MOUNT_RECORDING)
    expect(page.get_by_role("heading", name="Upload a traceset")).to_be_visible()


def open_upload_view(page: Page, served: Served) -> None:
    """Sign in on the page's /upload (unless this tab is signed in), then mount the
    recording upload view (``mount_recording_view``)."""
    page.goto(served.url + "/upload")
    if page.evaluate("sessionStorage.getItem('tracestore.token')") is None:
        page.get_by_label("API token").fill(served.token)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_label("API token")).to_have_count(0)
    mount_recording_view(page)


def make_folder(root: Path, sizes: dict[str, int]) -> Path:
    for name, size in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    return root


def stored_matches(served: Served, traceset_id: str, folder: Path, tmp: Path) -> None:
    """Every file of the folder is in the traceset, byte-exact (downloaded and hashed)."""
    with Client(served.url, served.token) as client:
        traceset = client.get_traceset(traceset_id)
        assert traceset.status == "ready"
        client.download_traceset(traceset_id, tmp / "back")
    local = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert sorted(f.name for f in traceset.files) == local
    for name in local:
        back = hashlib.sha256((tmp / "back" / name).read_bytes()).hexdigest()
        assert back == hashlib.sha256((folder / name).read_bytes()).hexdigest(), name


def fill_rank_count(page: Page, value: str) -> None:
    page.get_by_label("Rank count").fill(value)


def upload_folder(page: Page, folder: Path, rank_count: str = "1") -> None:
    """Pick ``folder``, declare its rank count in the form and press Upload."""
    page.get_by_label("Choose a folder").set_input_files(folder)
    fill_rank_count(page, rank_count)
    page.get_by_role("button", name="Upload").click()


def wait_until_saved(page: Page) -> None:
    """Until the upload's session exists and its state is in localStorage.

    A slow machine (CI runs the servers under coverage) gets 30 s; a timeout says what the
    view showed, so a failure names its cause rather than only the wait."""
    try:
        page.wait_for_function(
            "() => JSON.parse(localStorage.getItem('tracestore.uploads') || '[]').length === 1",
            timeout=30_000,
        )
    except PlaywrightTimeoutError:
        shown = page.evaluate("document.getElementById('app')?.innerText ?? ''")
        saved = page.evaluate("localStorage.getItem('tracestore.uploads')")
        raise AssertionError(
            f"no upload state saved in 30 s; saved: {saved!r}; the view showed:\n{shown}"
        ) from None


def upload_done(page: Page) -> dict[str, Any]:
    page.wait_for_function("() => window.uploaded.length > 0", timeout=60_000)
    traceset: dict[str, Any] = page.evaluate("window.uploaded[0]")
    return traceset
