"""The upload flow end to end through real HTTP: a traceset's parts sent in parallel and out of
order, the session resumed and completed twice, equal bytes stored once, a soft delete; and a
session looked up when unknown, expired or completed. The part PUTs: test_upload_parts.py;
completion's checks, retries and races: test_upload_completion.py."""

from __future__ import annotations

import hashlib
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import (
    complete,
    one_part_upload,
    put_parts,
    read_back,
    record_counts,
    request_upload,
    upload,
)
from tracestore.schemas import format_timestamp
from tracestore.server.services import Services
from tracestore.server.settings import MIB


def _files() -> dict[str, tuple[bytes, str]]:
    rng = random.Random(7)
    return {
        "rank_0.et": (rng.randbytes(12 * MIB + 12345), "primary"),  # three 5 MiB parts
        "nested/rank_1.et": (b"", "primary"),
        "config/run.yaml": (b"lr: 1e-4\n", "supporting"),
    }


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
        assert read_back(http, services, digest) == data
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


def test_unknown_and_foreign_sessions_are_not_found(http: TestClient) -> None:
    response = complete(http, "upload_nope", {})
    assert (
        assert_error(response, 404, "NOT_FOUND")["message"]
        == "Upload session 'upload_nope' not found"
    )
    assert http.get("/api/v1/tracesets/upload-url/upload_nope").status_code == 404
    missing = http.get("/api/v1/tracesets/ts_x")
    assert assert_error(missing, 404, "NOT_FOUND")["message"] == "Traceset 'ts_x' not found"


def test_expired_session_answers_410_and_fails_its_traceset(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    answer = one_part_upload(http, b"abcd")
    etag = http.put(answer["files"][0]["parts"][0]["url"], content=b"abcd").headers["etag"]
    clock.advance(hours=24, seconds=1)
    response = complete(http, answer["uploadId"], {"r.et": [{"partNumber": 1, "etag": etag}]})
    assert assert_error(response, 410, "GONE")["message"] == (
        f"Upload session '{answer['uploadId']}' has expired"
    )
    assert http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()["status"] == "upload_failed"
    assert not list((services.settings.data_dir / "blobs" / "staging").rglob("*.*"))
    assert http.get(f"/api/v1/tracesets/upload-url/{answer['uploadId']}").status_code == 410


def test_delete_is_soft(http: TestClient) -> None:
    traceset = upload(http, {"r.et": (b"x", "primary")}, {"shape": {"rankCount": 1}})
    assert http.delete(f"/api/v1/tracesets/{traceset['id']}").status_code == 204
    assert http.get(f"/api/v1/tracesets/{traceset['id']}").json()["status"] == "deleted"
    assert http.delete(f"/api/v1/tracesets/{traceset['id']}").status_code == 204


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


def test_every_upload_answer_says_when_the_traceset_expires_until_promoted(
    http: TestClient, clock: FakeClock
) -> None:
    """Issue 43, item 2: upload-url, its resume, completion and GET say when the traceset
    goes unless used (ttlDays after its last use); promoted, it never does (null)."""
    files = {"a.bin": (b"a" * 100, "supporting")}
    expected = format_timestamp(clock() + timedelta(days=3))
    started = request_upload(http, files, {"workload_family": "llm"}, ttlDays=3).json()
    assert (started["tracesetExpiresAt"], started["ttlDays"]) == (expected, 3)
    assert started["expiresAt"] != expected  # the session's own, as the reference has it
    upload_id = started["uploadId"]
    resumed = http.get(f"/api/v1/tracesets/upload-url/{upload_id}").json()
    assert (resumed["tracesetExpiresAt"], resumed["ttlDays"]) == (expected, 3)
    done = complete(http, upload_id, put_parts(http, started, files))
    assert done.status_code == 201, done.text
    assert (done.json()["expiresAt"], done.json()["ttlDays"]) == (expected, 3)
    shown = http.get(f"/api/v1/tracesets/{started['tracesetId']}").json()
    assert (shown["expiresAt"], shown["ttlDays"]) == (expected, 3)

    promoted = http.post(
        f"/api/v1/tracesets/{started['tracesetId']}/promote", json={"target": "tenant"}
    )
    assert promoted.status_code == 200, promoted.text
    resumed = http.get(f"/api/v1/tracesets/upload-url/{upload_id}").json()
    assert resumed["tracesetExpiresAt"] is None
    assert http.get(f"/api/v1/tracesets/{started['tracesetId']}").json()["expiresAt"] is None
