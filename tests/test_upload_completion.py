"""Completing an upload through real HTTP: a SHA-256 declared at upload or at completion
verified, missing and unexpected files and parts named, two concurrent completions doing the
work once, one cut off half way finished by a retry, a purge racing one, and the background
removal of a completed upload's staging."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import (
    complete,
    complete_in_a_process_that_dies,
    put_parts,
    read_back,
    record_counts,
    request_upload,
    upload,
)
from tracestore.server.services import Services
from tracestore.server.settings import MIB
from tracestore.server.storage.local import LocalBlobStore


@pytest.mark.parametrize("where", ["upload", "complete"])
def test_a_declared_sha256_is_verified_and_a_mismatch_leaves_the_session_open(
    http: TestClient, services: Services, where: str
) -> None:
    data, other = b"the bytes of rank 0", b"THE BYTES OF RANK 0"
    right, wrong = hashlib.sha256(data).hexdigest(), hashlib.sha256(other).hexdigest()
    spec = {"name": "r.et", "size": len(data), "role": "primary"}
    answer = http.post(
        "/api/v1/tracesets/upload-url",
        json={
            "name": "declared",
            "files": [spec | ({"sha256": right.upper()} if where == "upload" else {})],
            "workloadMetadata": {"shape": {"rankCount": 1}},
        },
    ).json()
    url = answer["files"][0]["parts"][0]["url"]

    def complete_with(etag: str) -> httpx.Response:
        parts = {"r.et": [{"partNumber": 1, "etag": etag}]}
        return complete(
            http, answer["uploadId"], parts, {"r.et": right} if where != "upload" else None
        )

    refused = complete_with(http.put(url, content=other).headers["etag"])
    assert assert_error(refused, 400, "VALIDATION_ERROR")["message"] == (
        f"SHA-256 of file 'r.et' is {wrong}, not the {right} the client declared; re-send its parts"
    )
    assert http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()["status"] == "uploading"
    done = complete_with(http.put(url, content=data).headers["etag"])
    assert done.status_code == 201, done.text
    assert done.json()["files"][0]["hash"] == f"sha256:{right}"


def test_sha256_given_at_completion_must_agree_with_the_one_declared_at_upload(
    http: TestClient, services: Services
) -> None:
    data = b"abcd"
    declared = hashlib.sha256(data).hexdigest()
    answer = http.post(
        "/api/v1/tracesets/upload-url",
        json={
            "name": "declared",
            "files": [{"name": "r.et", "size": 4, "role": "primary", "sha256": declared}],
            "workloadMetadata": {"shape": {"rankCount": 1}},
        },
    ).json()
    etags = put_parts(http, answer, {"r.et": (data, "primary")})
    other = hashlib.sha256(b"other").hexdigest()
    response = complete(http, answer["uploadId"], etags, {"r.et": other})
    assert assert_error(response, 400, "VALIDATION_ERROR")["message"] == (
        f"SHA-256 {other} given for file 'r.et' differs from the {declared} declared at upload"
    )
    again = complete(http, answer["uploadId"], etags)
    assert again.status_code == 201, again.text


def test_completion_names_missing_and_unexpected_files_and_parts(http: TestClient) -> None:
    files = {"a.et": (os.urandom(6 * MIB), "primary"), "b.et": (b"b", "primary")}
    started = request_upload(http, files, {"shape": {"rankCount": 2}})
    answer = started.json()
    etags = put_parts(http, answer, files)
    cases = [
        ({"a.et": etags["a.et"]}, "Missing files: 'b.et'"),
        ({**etags, "c.et": etags["b.et"]}, "File 'c.et' is not part of this upload"),
        ({**etags, "a.et": etags["a.et"][:1]}, "Missing parts for file 'a.et'"),
        ({**etags, "b.et": [*etags["b.et"], {"partNumber": 2, "etag": "x"}]}, "part 2 is not one"),
    ]
    for given, message in cases:
        response = complete(http, answer["uploadId"], given)
        assert message in assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert complete(http, answer["uploadId"], etags).status_code == 201


def test_a_request_naming_parts_no_file_has_is_refused_before_the_store_is_asked(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the request alone shows wrong is answered without listing any file's parts (an
    # object store's listing is a request per file): a 400, even with the store down.
    files = {f"f{i}.bin": (b"x" * 10, "supporting") for i in range(5)}
    answer = request_upload(http, files, {"shape": {"rankCount": 1}}).json()

    def down(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the store is down")

    monkeypatch.setattr(services.store, "list_parts", down)
    for number in (1, 2):  # missing parts of f4.bin; part 2 of a one-part file
        parts = {name: [{"partNumber": 1, "etag": "0" * 32}] for name in files}
        parts["f4.bin"] = [{"partNumber": n, "etag": "0" * 32} for n in range(2, number + 1)]
        response = complete(http, answer["uploadId"], parts)
        assert response.status_code == 400, response.text


def test_two_concurrent_completes_do_the_work_once(http: TestClient, services: Services) -> None:
    files = {f"rank_{i}.et": (os.urandom(3 * MIB), "primary") for i in range(4)}
    answer = request_upload(http, files, {"shape": {"rankCount": 4}}).json()
    etags = put_parts(http, answer, files)
    barrier = threading.Barrier(2)

    def finish(_: int) -> tuple[int, Any]:
        barrier.wait()
        response = complete(http, answer["uploadId"], etags)
        return response.status_code, response.json()

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(finish, range(2)))
    statuses = sorted(status for status, _ in results)
    assert statuses in ([200, 201], [201, 409]), results
    if statuses == [201, 409]:
        conflict = next(body for status, body in results if status == 409)
        assert conflict["error"]["message"] == (
            "Upload session is already being completed by another request"
        )
    assert record_counts(services)["tracesets"] == 1
    assert complete(http, answer["uploadId"], etags).status_code == 200


@pytest.mark.parametrize("dies_in", ["seal_file", "place_file"])
def test_a_completion_cut_off_half_way_is_finished_by_a_retry(
    http: TestClient,
    services: Services,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    dies_in: str,
) -> None:
    files = {"a.et": (b"a" * 100, "primary"), "b.et": (b"b" * 100, "primary")}
    answer = request_upload(http, files, {"shape": {"rankCount": 2}}).json()
    etags = put_parts(http, answer, files)
    store = services.store
    assert isinstance(store, LocalBlobStore)
    original = getattr(store, dies_in)
    calls = 0

    def dies_on_the_second_file(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise SystemExit("killed")  # what a dying worker looks like from inside
        return original(*args, **kwargs)

    monkeypatch.setattr(store, dies_in, dies_on_the_second_file)
    complete_in_a_process_that_dies(http, services, answer["uploadId"], etags, monkeypatch)
    monkeypatch.setattr(store, dies_in, original)
    placed = sum(store.blob_exists(hashlib.sha256(d).hexdigest()) for d, _ in files.values())
    assert placed == (1 if dies_in == "place_file" else 0)
    traceset = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert traceset["status"] == "uploading"
    assert complete(http, answer["uploadId"], etags).status_code == 409  # lease still held
    clock.advance(seconds=61)
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    for entry in done.json()["files"]:
        assert entry["hash"] == "sha256:" + hashlib.sha256(files[entry["name"]][0]).hexdigest()


def test_a_purge_racing_a_completion_never_leaves_a_ready_traceset_without_bytes(
    http: TestClient, services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracestore.server.lifecycle import purge_blobs

    data = b"bytes shared across time"
    first = upload(http, {"a.et": (data, "primary")}, {"shape": {"rankCount": 1}})
    assert http.delete(f"/api/v1/tracesets/{first['id']}").status_code == 204
    clock.advance(days=2)  # the old blob is now past its grace period
    files = {"b.et": (data, "primary")}
    answer = request_upload(http, files, {"shape": {"rankCount": 1}}).json()
    etags = put_parts(http, answer, files)
    store = services.store
    assert isinstance(store, LocalBlobStore)
    place = store.place_file
    purges: list[tuple[int, int, bool]] = []

    def purge_first(*args: Any, **kwargs: Any) -> None:
        purges.append(purge_blobs(services, services.now()))
        place(*args, **kwargs)

    monkeypatch.setattr(store, "place_file", purge_first)
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    assert purges and purges[0][0] == 0, "the blob being completed must not be purged"
    digest = hashlib.sha256(data).hexdigest()
    assert read_back(http, services, digest) == data


def test_record_counts_waits_for_the_background_removal_of_staging(
    http: TestClient, services: Services
) -> None:
    # Counting walked the staging tree while the background worker deleted a completed
    # upload's staging, and failed with FileNotFoundError in CI; it now waits for the worker.
    files = {"a.et": (b"a" * 100, "primary")}
    upload(http, files, {"shape": {"rankCount": 1}})
    services.wait_for_background()
    settled = record_counts(services)
    staging = services.settings.data_dir / "blobs" / "staging" / "upload_late"
    staging.mkdir(parents=True)
    (staging / "0.data").write_bytes(b"x")

    def remove_later() -> None:
        time.sleep(0.3)  # still at work when the count starts
        (staging / "0.data").unlink()

    services.run_in_background(remove_later)
    assert record_counts(services)["files on disk"] == settled["files on disk"]
