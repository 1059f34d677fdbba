"""Uploading from the browser (issue 20, build item 4): a folder picked or dropped, the
metadata checked with the service's own rules and words, parts sent with progress, retried on
network errors, and finished after a reload with only the parts the service lacks; the stored
files compared byte for byte through the API."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page, Route, expect

from tests.test_e2e_serve import PART, Served, serving
from tests.web.conftest import SCREENSHOTS
from tests.web.seeding import sign_in
from tracestore import jsontext
from tracestore import metadata as rules
from tracestore.client import Client
from tracestore.errors import ValidationError

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
    """Until the upload's session exists and its state is in localStorage."""
    page.wait_for_function(
        "() => JSON.parse(localStorage.getItem('tracestore.uploads') || '[]').length === 1"
    )


def upload_done(page: Page) -> dict[str, Any]:
    page.wait_for_function("() => window.uploaded.length > 0", timeout=60_000)
    traceset: dict[str, Any] = page.evaluate("window.uploaded[0]")
    return traceset


# ---- the must-show: upload a small folder and see it appear ----


def test_the_pages_upload_link_uploads_a_folder_and_opens_it_then_the_list_shows_it(
    served: Served, page: Page, tmp_path: Path
) -> None:
    """Through the page's own router: the nav's Upload, the form, then the traceset's detail
    view (the router's onUploaded), then the list with it in."""
    folder = make_folder(tmp_path / "mixtral-run", {"rank0.json": 1_500, "rank1.json": 2_500})
    sign_in(page, served)
    page.get_by_role("link", name="Upload", exact=True).click()
    expect(page).to_have_url(served.url + "/upload")
    upload_folder(page, folder, rank_count="2")
    page.wait_for_url("**/tracesets/ts_*", timeout=60_000)
    expect(page.get_by_role("heading", name="mixtral-run")).to_be_visible()
    traceset_id = page.url.rsplit("/", 1)[-1]
    stored_matches(served, traceset_id, folder, tmp_path)
    page.get_by_role("link", name="Tracesets", exact=True).click()
    expect(page.get_by_role("link", name="mixtral-run")).to_be_visible()


def test_a_small_folder_uploads_and_appears_with_its_files_byte_exact(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(
        tmp_path / "llama-run",
        {"rank0.json": 2_000, "rank1.json": PART + 1_000, "logs/train.log": 300},
    )
    open_upload_view(page, served)
    page.get_by_label("Choose a folder").set_input_files(folder)
    expect(page.get_by_text("3 files")).to_be_visible()
    expect(page.get_by_label("Traceset name")).to_have_value("llama-run")
    fill_rank_count(page, "2")
    page.get_by_label("dp", exact=True).fill("2")
    page.get_by_label("Model family").fill("llama")
    expect(page.get_by_text("Rank count: 2")).to_be_visible()
    page.get_by_role("button", name="Upload").click()

    traceset = upload_done(page)
    expect(page.get_by_text("Uploaded llama-run: 3 files")).to_be_visible()
    assert traceset["status"] == "ready" and traceset["rankCountDerived"] == 2
    assert traceset["workloadMetadata"] == {
        "workload_family": "llama",
        "shape": {"rankCount": 2},
        "parallelism": {"dp": 2},
    }
    listed = httpx.get(
        served.url + "/api/v1/tracesets",
        params={"workload_family": "llama"},
        headers={"Authorization": f"Bearer {served.token}"},
    ).json()
    assert [t["id"] for t in listed["items"]] == [traceset["id"]]
    stored_matches(served, traceset["id"], folder, tmp_path)
    assert page.evaluate("localStorage.getItem('tracestore.uploads')") == "[]"


def test_a_metadata_file_is_sent_as_written(served: Served, page: Page, tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "run", {"trace.json": 500})
    text = '{"shape": {"rankCount": 1, "global_batch_size": 8}, "lr": 1.50, "big": 1e400}'
    (tmp_path / "meta.json").write_text(text)
    open_upload_view(page, served)
    page.get_by_label("Choose a folder").set_input_files(folder)
    page.get_by_label("From a JSON file").check()
    page.get_by_label("Metadata JSON file").set_input_files(tmp_path / "meta.json")
    expect(page.get_by_text("Rank count: 1")).to_be_visible()
    page.get_by_role("button", name="Upload").click()
    traceset = upload_done(page)
    answer = httpx.get(
        f"{served.url}/api/v1/tracesets/{traceset['id']}",
        headers={"Authorization": f"Bearer {served.token}"},
    )
    assert (
        '"workloadMetadata":{"shape":{"rankCount":1,"global_batch_size":8},"lr":1.50,"big":1e400}'
        in (answer.text.replace(" ", ""))
    )


def test_a_dropped_folder_is_walked_and_named_relative_to_it(served: Served, page: Page) -> None:
    open_upload_view(page, served)
    # FileSystemEntry objects as Chromium hands a drop over: readEntries answers in batches
    # (at most 100 at a time) until an empty one.
    names = page.evaluate(
        """async () => {
          const m = await import('/static/upload.js');
          const file = (name) => ({ isFile: true, isDirectory: false, name,
            file: (ok) => ok(new File(['x'], name)) });
          const dir = (name, children) => ({ isFile: false, isDirectory: true, name,
            createReader() {
              const batches = [];
              for (let i = 0; i < children.length; i += 100) {
                batches.push(children.slice(i, i + 100));
              }
              return { readEntries: (ok) => ok(batches.shift() ?? []) };
            } });
          const many = Array.from(
            { length: 150 }, (_, i) => file(`r${String(i).padStart(3, '0')}.json`));
          const files = await m.filesOfEntries(
            [dir('run', [dir('ranks', many), file('meta.txt')]), file('loose.log')], 'primary');
          return files.map((f) => f.name);
        }"""
    )
    assert len(names) == 152
    assert names[:3] == ["loose.log", "meta.txt", "ranks/r000.json"]
    assert names[-1] == "ranks/r149.json"


# ---- the rules, before anything is sent; the service's answer as it words it ----


def test_metadata_that_breaks_a_rule_is_refused_with_the_services_words_before_any_request(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"trace.json": 100})
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "upload-url" in r.url else None)
    open_upload_view(page, served)
    page.get_by_label("Choose a folder").set_input_files(folder)
    expect(page.get_by_text(rules.MISSING_RANK_COUNT_MESSAGE)).to_be_visible()
    fill_rank_count(page, "4")
    page.get_by_label("dp", exact=True).fill("3")
    expected = (
        "workloadMetadata.shape.rankCount 4 differs from the parallelism product 3 "
        "(dp × tp × sp × ep × pp)"
    )
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("alert").filter(has_text=expected)).to_be_visible()
    page.get_by_label("dp", exact=True).fill("2.0")
    expect(
        page.get_by_text(
            "workloadMetadata.parallelism.dp must be a whole number of at least 1, got 2.0"
        )
    ).to_be_visible()
    assert asked == []


def test_a_refusal_by_the_service_is_shown_as_the_api_words_it(
    served: Served, page: Page, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path / "run", {"trace.json": 100})
    name = "n" * 256  # the rules in the page pass it; the service refuses a name this long
    answer = httpx.post(
        served.url + "/api/v1/tracesets/upload-url",
        headers={"Authorization": f"Bearer {served.token}"},
        json={
            "name": name,
            "files": [{"name": "trace.json", "size": 100, "role": "primary"}],
            "workloadMetadata": {"shape": {"rankCount": 1}},
        },
    )
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    open_upload_view(page, served)
    page.get_by_label("Choose a folder").set_input_files(folder)
    page.get_by_label("Traceset name").evaluate(
        "(input, v) => { input.removeAttribute('maxlength'); input.value = v; }", name
    )
    fill_rank_count(page, "1")
    page.get_by_role("button", name="Upload").click()
    expect(page.get_by_role("alert").filter(has_text=message)).to_be_visible()
    assert page.evaluate("localStorage.getItem('tracestore.uploads')") in (None, "[]")


# ---- network errors, reloads ----


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


def test_the_pages_sha256_matches_hashlib(served: Served, page: Page) -> None:
    page.goto(served.url + "/")
    rng = random.Random(20)
    cases = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 100_003]
    for size in cases:
        data = rng.randbytes(size)
        cut = sorted(rng.sample(range(size + 1), min(size + 1, 4)))
        digest = page.evaluate(
            """async ([hex, cuts]) => {
              const { Sha256 } = await import('/static/sha256.js');
              const bytes = new Uint8Array(hex.match(/../g)?.map((h) => parseInt(h, 16)) ?? []);
              const sha = new Sha256();
              let at = 0;
              for (const c of [...cuts, bytes.length]) {
                sha.update(bytes.subarray(at, c));
                at = c;
              }
              return sha.hexDigest();
            }""",
            [data.hex(), cut],
        )
        assert digest == hashlib.sha256(data).hexdigest(), size


# ---- metadata_rules.js against tracestore/metadata.py ----


def python_verdict(text: str, has_primary: bool) -> dict[str, Any]:
    try:
        rank_count = rules.check_upload_metadata(
            jsontext.loads(text), has_primary_files=has_primary
        )
    except ValidationError as exc:
        return {"ok": False, "message": exc.message}
    return {"ok": True, "rankCount": rank_count}


JS_VERDICTS = """async (cases) => {
  const m = await import('/static/metadata_rules.js');
  return cases.map(([text, hasPrimary]) => {
    try {
      const value = m.parseJson(text);
      return { ok: true, rankCount: m.checkUploadMetadata(value, { hasPrimaryFiles: hasPrimary }) };
    } catch (error) {
      if (!(error instanceof m.RuleError)) return { ok: false, message: 'not a rule: ' + error };
      return { ok: false, message: error.message };
    }
  });
}"""

SEED_EXAMPLES = [
    '{"parallelism": {"dp": 32, "tp": 8, "pp": 1}, "shape": {"rankCount": 256}}',
    '{"shape": {"rankCount": 256}}',
    '{"parallelism": {"dp": 4, "tp": 2}}',
    "null",
    "{}",
    '{"shape": {"rankCount": 0}}',
    '{"shape": {"rankCount": -1}}',
    '{"shape": {"rankCount": 2.0}}',
    '{"shape": {"rankCount": "4"}}',
    '{"parallelism": {"dp": 0}}',
    '{"parallelism": {"tp": 2.0}}',
    '{"parallelism": {"ep": "4"}}',
    '{"parallelism": {"dp": true}}',
    '{"shape": {"rankCount": 8}, "parallelism": {"dp": 2, "tp": 2}}',
    '{"shape": {"rankCount": 2147483648}}',
    '{"shape": {"rankCount": 2147483647}}',
    '{"parallelism": {"dp": 65536, "tp": 65536}}',
    '{"shape": null, "parallelism": null}',
    '{"shape": {"rankCount": null}, "parallelism": {"dp": null, "tp": 4}}',
    '{"parallelism": {"cp": 2, "fsdp": 4}}',
    '{"shape": {"rank_count": 8}}',
    '{"shape": [1], "parallelism": {}}',
    '{"parallelism": "dp=4"}',
    "[]",
    '"text"',
    "7",
    '{"shape": {"rankCount": 1e3}}',
    '{"shape": {"rankCount": 4}, "shape": {"rankCount": 8}}',
    '{"parallelism": {"dp": ' + "9" * 100 + "}}",
    '{"parallelism": {"dp": '
    + "9" * 4000
    + ', "tp": '
    + "9" * 4000
    + ', "sp": '
    + "9" * 4000
    + "}}",
    '{"shape": {"rankCount": 1}, "note": "' + "é" * 40_000 + '"}',
    '{"shape": {"rankCount": 1}, "note": "' + "x" * 65_510 + '"}',
    '{"shape": {"rankCount": 1}, "n": ['
    + ",".join(["1e400", "1e-7", "1.5", "-0.0", "1e16"] * 4000)
    + "]}",
    '{"shape": {"rankCount": 1}, "s": "\\ud800"}',
    '{"shape": {"rankCount": 1}, "s": "\\udc00\\ud800x"}',
    '{"shape": {"rankCount": "' + "long" * 40 + '"}}',
    '{"shape": {"rankCount": "\\u00e9\\n\\u0001\\""}}',
    '{"parallelism": {"dp": [1, {"b": 2, "1": 3}]}}',
]

_NUMBERS = st.sampled_from(
    [
        *("1", "2", "4", "8", "0", "-1", "-0", "2.0", "1e3", "1E+2", "0.5", "3", "16"),
        *("2147483647", "2147483648", "65536", "1" + "0" * 30, "1e400", "-1e400", "1.5e-7"),
    ]
)
_SCALARS = st.one_of(
    _NUMBERS,
    st.sampled_from(["null", "true", "false", '"4"', '""', '"dp"']),
    st.text(max_size=6).map(lambda s: json.dumps(s, ensure_ascii=bool(len(s) % 2))),
)


def _object(members: dict[str, str]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members.items()) + "}"


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
        st.dictionaries(st.sampled_from(["a", "b", "2", "1"]), inner, max_size=3).map(_object),
    ),
    max_leaves=6,
)
_DEGREE_KEYS = st.sampled_from([*rules.DEGREES, "cp", "fsdp", "rankCount", "x"])
_PARALLELISM = st.one_of(
    st.dictionaries(_DEGREE_KEYS, st.one_of(_NUMBERS, _SCALARS), max_size=6).map(_object),
    _VALUES,
)
_SHAPE = st.one_of(
    st.dictionaries(
        st.sampled_from(["rankCount", "rank_count", "global_batch_size"]), _SCALARS, max_size=3
    ).map(_object),
    _VALUES,
)
# Mostly well-formed declarations, so that products, mismatches and limits come up often.
_GOOD = st.sampled_from(["1", "2", "3", "4", "8", "16", "64", "1024", "65536"])
_DEGREE = st.one_of(_GOOD, _GOOD, _GOOD, _NUMBERS, _SCALARS)
_PLAUSIBLE = st.builds(
    lambda rank_count, degrees, extra: _object(
        {
            **({"shape": _object({"rankCount": rank_count})} if rank_count else {}),
            **({"parallelism": _object(degrees)} if degrees is not None else {}),
            **extra,
        }
    ),
    st.one_of(st.none(), _GOOD, _GOOD, _NUMBERS),
    st.one_of(st.none(), st.dictionaries(_DEGREE_KEYS, _DEGREE, max_size=5)),
    st.dictionaries(st.sampled_from(["workload_family", "note"]), _VALUES, max_size=1),
)
_METADATA = st.one_of(
    _PLAUSIBLE,
    _PLAUSIBLE,
    st.dictionaries(
        st.sampled_from(["shape", "parallelism", "workload_family", "precision"]),
        st.one_of(_SHAPE, _PARALLELISM, _VALUES),
        max_size=4,
    ).map(_object),
    st.builds(
        lambda shape, parallelism: _object({"shape": shape, "parallelism": parallelism}),
        _SHAPE,
        _PARALLELISM,
    ),
    _VALUES,
)


def test_the_pages_rules_give_the_services_verdict_and_message_on_the_seeds_examples(
    served: Served, page: Page
) -> None:
    page.goto(served.url + "/")
    cases = [(text, primary) for text in SEED_EXAMPLES for primary in (True, False)]
    got = page.evaluate(JS_VERDICTS, [list(c) for c in cases])
    for (text, primary), verdict in zip(cases, got, strict=True):
        assert verdict == python_verdict(text, primary), text[:200]


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cases=st.lists(st.tuples(_METADATA, st.booleans()), min_size=1, max_size=20))
def test_the_pages_rules_give_the_services_verdict_and_message_on_generated_metadata(
    served: Served, page: Page, cases: list[tuple[str, bool]]
) -> None:
    if page.url == "about:blank":
        page.goto(served.url + "/")
    got = page.evaluate(JS_VERDICTS, [list(c) for c in cases])
    for (text, primary), verdict in zip(cases, got, strict=True):
        assert verdict == python_verdict(text, primary), text


def test_the_form_builds_metadata_the_rules_read_like_the_api(served: Served, page: Page) -> None:
    page.goto(served.url + "/")
    built = page.evaluate(
        """async () => {
          const m = await import('/static/metadata_rules.js');
          const text = (fields) => m.writeJson(m.metadataFromFields(fields));
          return [
            text({ rankCount: '16', dp: '4', tp: ' 4 ', workload_family: 'llama', cp: '' }),
            text({ rankCount: '2.5', dp: 'four' }),
            text({}),
          ];
        }"""
    )
    assert built[0] == (
        '{"workload_family":"llama","shape":{"rankCount":16},"parallelism":{"dp":4,"tp":4}}'
    )
    assert built[1] == '{"shape":{"rankCount":2.5},"parallelism":{"dp":"four"}}'
    assert built[2] == "null"
    assert python_verdict(built[1], True)["message"] == (
        "workloadMetadata.shape.rankCount must be a whole number of at least 1, got 2.5"
    )
