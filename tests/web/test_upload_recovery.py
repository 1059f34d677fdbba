"""Uploading from the browser when things go wrong (issue 20, build item 4): network errors
retried while the view says it waits, expired part URLs signed afresh, refused parts shown in
the API's words, an upload cut by a reload finished with only the parts the service lacks, a
stopped one tried again in place, part URLs past the first page, an upload shown again (not
sent twice) when its view comes back, an upload-url cut off after it was sent not sent again,
and a page without ``crypto.subtle``."""

from __future__ import annotations

import dataclasses
import socket
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import httpx
from playwright.sync_api import Page, Route, expect

from tests.support import httpserver
from tests.support.paths import SCREENSHOTS
from tests.support.served import PART, Served, serving
from tests.support.upload_page import (
    MOUNT_RECORDING,
    PARTS,
    fill_rank_count,
    make_folder,
    mount_recording_view,
    open_upload_view,
    stored_matches,
    upload_done,
    upload_folder,
    wait_until_saved,
)


def test_a_network_error_is_retried_and_the_view_says_it_is_waiting(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"trace.json": 20_000})
    failures = {"left": 2}

    def flaky(route: Route) -> None:
        if failures["left"]:
            failures["left"] -= 1
            route.abort("connectionfailed")
        else:
            route.continue_()

    page.route(PARTS, flaky)
    open_upload_view(page, served)
    upload_folder(page, folder)
    expect(
        page.get_by_role("status").filter(has_text="no answer yet; trying again")
    ).to_be_visible()
    traceset = upload_done(page)
    assert failures["left"] == 0
    stored_matches(served, traceset["id"], folder, tmp_path)


UPLOAD_PATH = "/api/v1/tracesets/upload-url"
# Headers of one connection, not of the request or answer a proxy passes on.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class CuttingProxy(BaseHTTPRequestHandler):
    """A proxy in front of the service (``upstream``) that passes every request on, and
    answers it, but for a POST of upload-url: that one reaches the service, which creates
    the traceset (its id goes to ``cut``), and the connection is closed without an answer.

    One request a connection (HTTP/1.0): Chromium itself sends a request again, whatever its
    method, when a connection it kept alive from an earlier request closes without an answer
    (a race it cannot tell from the server's idle timeout); what is tested here is the page's
    own retrying, on a connection that was new."""

    protocol_version = "HTTP/1.0"
    upstream = ""
    cut: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        answer = httpx.request(
            self.command,
            self.upstream + self.path,
            headers=headers,
            content=self.rfile.read(length) if length else None,
            timeout=30,
        )
        if self.command == "POST" and self.path == UPLOAD_PATH:
            self.cut.append(answer.json()["tracesetId"])
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = relay


def test_an_upload_url_cut_off_after_it_was_sent_is_not_sent_again(
    served: Served, page: Page, tmp_path: Path
) -> None:
    """upload-url creates a traceset: when no answer comes after it was sent, the page says
    the service may have created it rather than send it again (issue 42, item 5)."""
    folder = make_folder(tmp_path / "cut-run", {"trace.json": 500})
    proxy: type[CuttingProxy] = type("Proxy", (CuttingProxy,), {"upstream": served.url, "cut": []})
    with httpserver.serving(proxy) as url:
        open_upload_view(page, dataclasses.replace(served, url=url))
        upload_folder(page, folder)
        alert = page.locator(".upload-progress .error")
        expect(alert).not_to_be_empty(timeout=30_000)  # sent again, it would take longer
    assert len(proxy.cut) == 1
    expect(alert).to_contain_text("went out but no answer came back")
    expect(alert).to_contain_text('may have created the traceset "cut-run"')
    expect(alert).to_contain_text("did not send the request twice")
    with served.api() as api:
        made = api.get("/api/v1/tracesets", params={"status": "uploading"}).json()["items"]
    assert [t["id"] for t in made] == proxy.cut
    expect(page.get_by_role("button", name="Try again")).to_have_count(0)
    assert page.evaluate("localStorage.getItem('tracestore.uploads')") in (None, "[]")


def test_an_expired_part_url_is_signed_afresh_and_a_refused_part_shows_the_apis_message(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"trace.json": 3_000})
    answers = [
        (403, "The URL has expired"),  # once: the page asks the resume route for a fresh URL
        None,
    ]
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "fromPart=" in r.url else None)

    def expiring(route: Route) -> None:
        answer = answers.pop(0) if answers else None
        if answer is None:
            route.continue_()
        else:
            envelope = {"error": {"code": "FORBIDDEN", "message": answer[1], "requestId": "r1"}}
            route.fulfill(status=answer[0], json=envelope)

    page.route(PARTS, expiring)
    open_upload_view(page, served)
    upload_folder(page, folder)
    traceset = upload_done(page)
    assert [u.split("?", 1)[1] for u in asked] == ["file=trace.json&fromPart=1"]
    stored_matches(served, traceset["id"], folder, tmp_path)

    # A refusal that no retry mends is shown as the API words it, the upload kept to resume.
    page.unroute(PARTS)
    message = "The session takes no more parts (failed or completed)"
    page.route(
        PARTS,
        lambda route: route.fulfill(
            status=409, json={"error": {"code": "CONFLICT", "message": message, "requestId": "r2"}}
        ),
    )
    open_upload_view(page, served)
    upload_folder(page, folder)
    expect(page.get_by_role("alert").filter(has_text=f"{message} (request r2)")).to_be_visible()
    expect(page.get_by_role("button", name="Try again")).to_be_visible()


def test_an_upload_cut_by_a_reload_finishes_with_only_the_missing_parts(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(
        tmp_path / "gpt-run",
        {"a/small.txt": 100, "big.bin": 2 * PART + 1_000, "rank0.bin": PART + 10},
    )  # 6 parts: 1 + 3 + 2
    held: list[Route] = []
    passed: list[str] = []

    def first_two(route: Route) -> None:
        # Handlers run one at a time on Playwright's dispatcher: no lock needed (one would
        # deadlock, as continue_ hands over to the next handler call).
        if len(passed) < 2:
            passed.append(route.request.url)
            route.continue_()
        else:
            held.append(route)  # never answered: the reload cuts them off

    page.route(PARTS, first_two)
    open_upload_view(page, served)
    page.get_by_label("Choose a folder").set_input_files(folder)
    fill_rank_count(page, "8")
    page.get_by_label("tp", exact=True).fill("8")
    page.get_by_role("button", name="Upload").click()
    saved_parts = """() => (JSON.parse(localStorage.getItem('tracestore.uploads') || '[]')[0]?.etags
        ? Object.values(JSON.parse(localStorage.getItem('tracestore.uploads'))[0].etags)
            .reduce((n, p) => n + Object.keys(p).length, 0) : 0)"""
    page.wait_for_function(f"() => ({saved_parts})() === 2")
    expect(page.get_by_label("Overall progress")).to_be_visible()
    page.wait_for_timeout(300)  # the progress bars' next frame
    page.screenshot(path=str(SCREENSHOTS / "upload.png"))
    state = page.evaluate("JSON.parse(localStorage.getItem('tracestore.uploads'))[0]")

    # The reload cuts the held PUTs off; only then may the route go (removing it first would
    # let them through).
    page.reload()
    page.unroute(PARTS)
    sent_after: list[str] = []
    page.on(
        "request",
        lambda r: (
            sent_after.append(r.url) if r.method == "PUT" and "/blobs/parts/" in r.url else None
        ),
    )
    mount_recording_view(page)
    expect(page.get_by_text("Unfinished upload: gpt-run")).to_be_visible()
    expect(page.get_by_text("2 parts sent")).to_be_visible()

    # Another folder is refused by name; the same one continues.
    other = make_folder(tmp_path / "other", {"x.txt": 100})
    page.get_by_label("Folder for gpt-run").set_input_files(other)
    expect(page.get_by_text("a/small.txt is not among the files picked")).to_be_visible()
    page.get_by_label("Folder for gpt-run").set_input_files(folder)
    traceset = upload_done(page)
    expect(page.get_by_text("Uploaded gpt-run: 3 files")).to_be_visible()
    expect(page.get_by_text("Unfinished upload: gpt-run")).to_have_count(0)
    assert traceset["id"] == state["tracesetId"]
    assert len(sent_after) == 4 and not set(sent_after) & set(passed)
    stored_matches(served, traceset["id"], folder, tmp_path)
    assert page.evaluate("localStorage.getItem('tracestore.uploads')") == "[]"


def test_a_stopped_upload_tries_again_in_place_and_a_forgotten_one_is_gone(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"big.bin": PART + 5, "small.json": 10})
    held: list[Route] = []
    page.route(PARTS, lambda route: held.append(route))  # every part waits for the Stop
    open_upload_view(page, served)
    upload_folder(page, folder)
    wait_until_saved(page)
    expect(page.get_by_label("big.bin")).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    expect(
        page.get_by_role("alert").filter(has_text="Stopped; what was sent is kept")
    ).to_be_visible()
    page.unroute(PARTS)  # the held PUTs were aborted by the Stop
    page.get_by_role("button", name="Try again").click()
    traceset = upload_done(page)
    stored_matches(served, traceset["id"], folder, tmp_path)

    # An upload left unfinished can be forgotten: its card and its saved state go.
    page.route(PARTS, lambda route: held.append(route))
    open_upload_view(page, served)
    upload_folder(page, folder)
    wait_until_saved(page)
    page.reload()
    open_upload_view(page, served)
    page.get_by_role("button", name="Forget it").click()
    expect(page.get_by_text("Unfinished upload: run")).to_have_count(0)
    assert page.evaluate("localStorage.getItem('tracestore.uploads')") == "[]"


def test_part_urls_past_the_first_page_come_from_the_resume_route(
    page: Page, tmp_path: Path
) -> None:
    # One URL per answer: every part after each file's first asks the resume route for its own.
    folder = make_folder(tmp_path / "run", {"a.bin": 2 * PART + 7, "b.bin": PART + 3})
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "fromPart=" in r.url else None)
    env = {"TRACESTORE_PART_URLS_PER_ANSWER": "1"}
    with serving(tmp_path / "data", env=env) as served:
        open_upload_view(page, served)
        upload_folder(page, folder)
        traceset = upload_done(page)
        stored_matches(served, traceset["id"], folder, tmp_path)
    assert sorted(u.split("?", 1)[1] for u in asked) == [
        "file=a.bin&fromPart=2",
        "file=a.bin&fromPart=3",
        "file=b.bin&fromPart=2",
    ]


def remount_elsewhere_and_back(page: Page, back: bool = True) -> None:
    """What the page's router does when the user opens another view (and the upload again)."""
    page.evaluate("document.getElementById('app').replaceChildren('another view')")
    if back:
        page.evaluate(MOUNT_RECORDING)


def test_an_upload_running_while_another_view_is_open_is_shown_again_not_sent_twice(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"big.bin": PART + 5, "small.json": 10})
    page.route(PARTS, lambda route: None)  # held until the route goes
    open_upload_view(page, served)
    upload_folder(page, folder)
    wait_until_saved(page)
    remount_elsewhere_and_back(page)
    expect(page.get_by_label("Overall progress")).to_be_visible()
    expect(page.get_by_text("Unfinished upload")).to_have_count(0)
    page.get_by_label("Choose a folder").set_input_files(folder)
    page.get_by_label("Rank count").fill("1")
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_text("An upload is already running")).to_be_visible()
    page.unroute(PARTS)  # the held PUTs go on
    traceset = upload_done(page)
    stored_matches(served, traceset["id"], folder, tmp_path)

    # One that finishes while another view is open does not open its traceset over that view.
    # Started once the first has forgotten its state and the form is idle again.
    page.wait_for_function("() => localStorage.getItem('tracestore.uploads') === '[]'")
    expect(page.get_by_role("button", name="Upload")).to_be_enabled()
    page.route(PARTS, lambda route: None)
    page.get_by_label("Choose a folder").set_input_files(folder)
    page.get_by_role("button", name="Upload").click()
    wait_until_saved(page)
    remount_elsewhere_and_back(page, back=False)
    page.unroute(PARTS)
    page.wait_for_function("() => localStorage.getItem('tracestore.uploads') === '[]'")
    page.wait_for_timeout(300)
    assert page.evaluate("window.uploaded.length") == 1
    assert page.evaluate("document.getElementById('app').textContent") == "another view"


def test_without_crypto_subtle_the_page_hashes_with_its_own_sha256(
    served: Served, page: Page, tmp_path: Path
) -> None:
    # A page served over plain http on a LAN is no secure context: crypto.subtle is missing.
    page.add_init_script(
        "Object.defineProperty(Crypto.prototype, 'subtle', { get: () => undefined })"
    )
    folder = make_folder(tmp_path / "run", {"big.bin": PART + 4_321, "small.json": 10, "empty": 0})
    open_upload_view(page, served)
    assert page.evaluate("crypto.subtle === undefined")
    upload_folder(page, folder)
    traceset = upload_done(page)
    # The service refuses a completion whose SHA-256 differs from what it stored.
    stored_matches(served, traceset["id"], folder, tmp_path)
