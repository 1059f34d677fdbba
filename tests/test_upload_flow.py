"""The upload flow through real HTTP: parts in parallel and out of order, resume, complete,
retries, refused parts, concurrent completion."""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import TEST_BASE, FakeClock
from tests.uploading import (
    complete,
    complete_in_a_process_that_dies,
    put_parts,
    record_counts,
    request_upload,
    upload,
)
from tracestore.server.localblobs import LocalBlobStore
from tracestore.server.services import Services
from tracestore.server.settings import MIB


def _files() -> dict[str, tuple[bytes, str]]:
    rng = random.Random(7)
    return {
        "rank_0.et": (rng.randbytes(12 * MIB + 12345), "primary"),  # three 5 MiB parts
        "nested/rank_1.et": (b"", "primary"),
        "config/run.yaml": (b"lr: 1e-4\n", "supporting"),
    }


def _read_back(http: TestClient, services: Services, sha256: str) -> bytes:
    store = services.store
    assert isinstance(store, LocalBlobStore)
    expires = services.now() + timedelta(minutes=5)
    url = store.download_url(sha256, filename="x", expires_at=expires, base_url=TEST_BASE)
    response = http.get(url)
    assert response.status_code == 200, response.text
    return bytes(response.content)


def test_three_file_traceset_parallel_out_of_order_resumed_and_completed_twice(
    http: TestClient, services: Services
) -> None:
    files = _files()
    started = request_upload(http, files, {"parallelism": {"dp": 2}})
    assert started.status_code == 200, started.text
    answer = started.json()
    assert answer["uploadId"].startswith("upload_") and len(answer["uploadId"]) == 34
    assert answer["tracesetId"].startswith("ts_") and len(answer["tracesetId"]) == 30
    by_name = {f["name"]: f for f in answer["files"]}
    assert [p["size"] for p in by_name["rank_0.et"]["parts"]] == [5 * MIB, 5 * MIB, 2 * MIB + 12345]
    assert by_name["nested/rank_1.et"]["parts"] == [
        {"partNumber": 1, "size": 0, "url": by_name["nested/rank_1.et"]["parts"][0]["url"]}
    ]
    assert http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()["status"] == "uploading"

    # Send some parts in parallel, in shuffled order, then "lose" the client's state.
    jobs = [(f["name"], p) for f in answer["files"] for p in f["parts"]]
    random.Random(3).shuffle(jobs)
    first, rest = jobs[:3], jobs[3:]

    def send(job: tuple[str, dict[str, Any]]) -> None:
        name, part = job
        offset = (part["partNumber"] - 1) * answer["partSize"]
        response = http.put(part["url"], content=files[name][0][offset : offset + part["size"]])
        assert response.status_code == 200, response.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, first))

    resumed = http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}")
    assert resumed.status_code == 200, resumed.text
    view = resumed.json()
    assert view["state"] == "open"
    received = sum(len(f["receivedParts"]) for f in view["files"])
    missing = [(f["name"], p) for f in view["files"] for p in f["parts"]]
    assert received == 3 and len(missing) == len(rest)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, missing))

    final = http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}").json()
    etags = {
        f["name"]: [{"partNumber": p["partNumber"], "etag": p["etag"]} for p in f["receivedParts"]]
        for f in final["files"]
    }
    assert all(not f["parts"] for f in final["files"])

    first_completion = complete(http, answer["uploadId"], etags)
    assert first_completion.status_code == 201, first_completion.text
    second = complete(http, answer["uploadId"], etags)
    assert second.status_code == 200
    assert second.json() == first_completion.json()

    traceset = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert traceset == first_completion.json()
    assert traceset["status"] == "ready"
    assert traceset["rankCountDerived"] == 2
    assert traceset["fileCount"] == 3
    assert traceset["totalSize"] == sum(len(d) for d, _ in files.values())
    for entry in traceset["files"]:
        data = files[entry["name"]][0]
        digest = hashlib.sha256(data).hexdigest()
        assert entry["hash"] == f"sha256:{digest}"
        assert _read_back(http, services, digest) == data
    roles = {f["name"]: (f["role"], f["metadataStatus"]) for f in traceset["files"]}
    assert roles["config/run.yaml"] == ("supporting", "complete")
    assert traceset["hash"].startswith("sha256:")
    # No staging bytes are left behind once the upload is complete (removed in the
    # background).
    services.wait_for_background()
    assert list((services.settings.data_dir / "blobs" / "staging").iterdir()) == []


def test_identical_bytes_are_stored_once_and_equal_content_has_equal_hash(
    http: TestClient, services: Services
) -> None:
    files = {"a.json": (b"same bytes", "primary")}
    one = upload(http, files, {"shape": {"rankCount": 1}})
    blobs_after_one = record_counts(services)["blobs"]
    two = upload(http, files, {"shape": {"rankCount": 1}}, name="again")
    assert record_counts(services)["blobs"] == blobs_after_one
    assert one["hash"] == two["hash"] and one["id"] != two["id"]
    assert one["files"][0]["rankRange"] == {"start": 0, "end": 0}


def _with_query(url: str, **changes: Any) -> str:
    parts = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update({k: str(v) for k, v in changes.items()})
    return urlunparse(parts._replace(query=urlencode(query)))


def _started(http: TestClient, data: bytes) -> dict[str, Any]:
    response = request_upload(http, {"r.et": (data, "primary")}, {"shape": {"rankCount": 1}})
    assert response.status_code == 200
    return dict(response.json())


@pytest.mark.parametrize(
    "change,status",
    [
        ({"signature": "AAAA"}, 403),
        ({"size": 3}, 403),
        ({"expires": 4102444800}, 403),
    ],
)
def test_tampered_part_urls_are_refused_and_store_nothing(
    http: TestClient, services: Services, change: dict[str, Any], status: int
) -> None:
    answer = _started(http, b"abcd")
    before = record_counts(services)
    url = _with_query(answer["files"][0]["parts"][0]["url"], **change)
    response = http.put(url, content=b"abcd")
    assert response.status_code == status
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert record_counts(services) == before


def test_expired_part_url_is_refused(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    answer = _started(http, b"abcd")
    clock.advance(hours=1, seconds=1)
    before = record_counts(services)
    response = http.put(answer["files"][0]["parts"][0]["url"], content=b"abcd")
    assert response.status_code == 403
    assert "expired" in response.json()["error"]["message"]
    assert record_counts(services) == before


@pytest.mark.parametrize("sent,status", [(b"abc", 400), (b"abcde", 413)])
def test_wrong_size_parts_are_refused_and_keep_the_good_part(
    http: TestClient, services: Services, sent: bytes, status: int
) -> None:
    answer = _started(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    good = http.put(url, content=b"abcd")
    assert good.status_code == 200
    before = record_counts(services)
    response = http.put(url, content=sent)
    assert response.status_code == status, response.text
    assert record_counts(services) == before
    etags = {"r.et": [{"partNumber": 1, "etag": good.headers["etag"]}]}
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    assert done.json()["files"][0]["hash"] == "sha256:" + hashlib.sha256(b"abcd").hexdigest()


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
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"] == (
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
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        f"SHA-256 {other} given for file 'r.et' differs from the {declared} declared at upload"
    )
    again = complete(http, answer["uploadId"], etags)
    assert again.status_code == 201, again.text


def test_chunked_part_bodies_are_size_checked_as_they_arrive(
    http: TestClient, services: Services
) -> None:
    answer = _started(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    before = record_counts(services)
    response = http.put(url, content=iter([b"ab", b"cd", b"e"]))
    assert response.status_code == 413
    assert record_counts(services) == before


def test_part_checksum_header_is_verified(http: TestClient, services: Services) -> None:
    import base64

    answer = _started(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    wrong = base64.b64encode(hashlib.sha256(b"xxxx").digest()).decode()
    before = record_counts(services)
    response = http.put(url, content=b"abcd", headers={"x-amz-checksum-sha256": wrong})
    assert response.status_code == 400
    assert "x-amz-checksum-sha256" in response.json()["error"]["message"]
    assert record_counts(services) == before
    right = base64.b64encode(hashlib.sha256(b"abcd").digest()).decode()
    assert (
        http.put(url, content=b"abcd", headers={"x-amz-checksum-sha256": right}).status_code == 200
    )


def test_resending_a_part_replaces_it(http: TestClient) -> None:
    answer = _started(http, b"abcd")
    url = answer["files"][0]["parts"][0]["url"]
    old = http.put(url, content=b"wxyz").headers["etag"]
    new = http.put(url, content=b"abcd").headers["etag"]
    stale = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": old}]})
    assert stale.status_code == 400 and "ETag" in stale.json()["error"]["message"]
    done = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": new}]})
    assert done.json()["files"][0]["hash"] == "sha256:" + hashlib.sha256(b"abcd").hexdigest()


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
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]["message"]
    assert complete(http, answer["uploadId"], etags).status_code == 201


def test_unknown_and_foreign_sessions_are_not_found(http: TestClient) -> None:
    response = complete(http, "upload_nope", {})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Upload session 'upload_nope' not found"
    assert http.get("/api/v1/tracesets/upload-url/upload_nope").status_code == 404
    missing = http.get("/api/v1/tracesets/ts_x")
    assert missing.json()["error"]["message"] == "Traceset 'ts_x' not found"


def test_expired_session_answers_410_and_fails_its_traceset(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    answer = _started(http, b"abcd")
    etag = http.put(answer["files"][0]["parts"][0]["url"], content=b"abcd").headers["etag"]
    clock.advance(hours=24, seconds=1)
    response = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": etag}]})
    assert response.status_code == 410
    assert response.json()["error"] == {
        "code": "GONE",
        "message": f"Upload session '{answer['uploadId']}' has expired",
        "requestId": response.json()["error"]["requestId"],
    }
    assert http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()["status"] == "upload_failed"
    assert not list((services.settings.data_dir / "blobs" / "staging").rglob("*.*"))
    assert http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}").status_code == 410


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


def test_delete_is_soft(http: TestClient) -> None:
    traceset = upload(http, {"r.et": (b"x", "primary")}, {"shape": {"rankCount": 1}})
    assert http.delete(f"/api/v1/tracesets/{traceset['id']}").status_code == 204
    assert http.get(f"/api/v1/tracesets/{traceset['id']}").json()["status"] == "deleted"
    assert http.delete(f"/api/v1/tracesets/{traceset['id']}").status_code == 204


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
    assert _read_back(http, services, digest) == data


def test_record_counts_waits_for_the_background_removal_of_staging(
    http: TestClient, services: Services
) -> None:
    # Counting walked the staging tree while the background worker deleted a completed
    # upload's staging, and failed with FileNotFoundError in CI; it now waits for the worker.
    files = {"a.et": (b"a" * 100, "primary")}
    upload(http, files, {"shape": {"rankCount": 1}})
    services.wait_for_background()
    settled = record_counts(services)
    staging = services.settings.data_dir / "blobs" / "staging" / "upload_late" / "0"
    staging.mkdir(parents=True)
    (staging / "data").write_bytes(b"x")

    def remove_later() -> None:
        time.sleep(0.3)  # still at work when the count starts
        (staging / "data").unlink()

    services.run_in_background(remove_later)
    assert record_counts(services)["files on disk"] == settled["files on disk"]


def test_resume_of_a_completed_session_answers_its_ready_traceset_and_no_urls(
    http: TestClient,
) -> None:
    files = {"a.bin": (b"a" * 100, "supporting")}
    answer = request_upload(http, files).json()
    done = complete(http, answer["uploadId"], put_parts(http, answer, files))
    assert done.status_code == 201, done.text
    resumed = http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}")
    assert resumed.status_code == 200, resumed.text
    view = resumed.json()
    assert (view["state"], view["tracesetId"]) == ("completed", done.json()["id"])
    assert [(f["name"], f["parts"]) for f in view["files"]] == [("a.bin", [])]
