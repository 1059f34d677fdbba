"""Lazy staging: sessions none (or some) of whose files' parts ever arrived, through the
resume, completion and the sweeper."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.uploading import complete, put_parts, request_upload
from tracestore.server.lifecycle import sweep
from tracestore.server.presigned import PartGrant
from tracestore.server.receiving import open_part
from tracestore.server.services import Services
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.staging import ETAG


def test_a_session_with_no_part_resumes_fails_to_complete_and_expires(
    http: TestClient, services: Services, clock: FakeClock
) -> None:
    files = {"a.bin": (b"a" * 1000, "supporting"), "z.bin": (b"", "supporting")}
    started = request_upload(http, files).json()
    staging = services.settings.data_dir / "blobs" / "staging" / started["uploadId"]
    assert not staging.exists()
    resumed = http.get(f"/api/v1/tracesets/upload-url/{started['uploadId']}")
    assert resumed.status_code == 200, resumed.text
    assert [f["receivedParts"] for f in resumed.json()["files"]] == [[], []]
    guessed = {n: [{"partNumber": 1, "etag": "0" * 32}] for n in files}
    refused = complete(http, started["uploadId"], guessed)
    assert "never received" in assert_error(refused, 400, "VALIDATION_ERROR")["message"]
    # one file arrives, the empty one never does
    only_a = {**started, "files": started["files"][:1]}
    put_parts(http, only_a, {"a.bin": files["a.bin"]})
    partial = http.get(f"/api/v1/tracesets/upload-url/{started['uploadId']}").json()
    assert [len(f["receivedParts"]) for f in partial["files"]] == [1, 0]
    refused = complete(http, started["uploadId"], guessed)
    assert refused.status_code == 400, refused.text
    clock.advance(hours=25)
    assert sweep(services).failed_sessions == 1
    assert not staging.exists()
    never = request_upload(http, files).json()  # expires with no staging at all
    clock.advance(hours=25)
    assert sweep(services).failed_sessions == 1
    assert http.get(f"/api/v1/tracesets/upload-url/{never['uploadId']}").status_code == 410
    assert sweep(services).cleaned_staging == 0


def test_a_part_put_opens_its_staging_area_with_its_first_bytes(
    http: TestClient, services: Services
) -> None:
    # open_part runs on the event loop (a short read): the directories and the claim, which
    # can take milliseconds, are made by the first write, on the body's thread.
    started = request_upload(http, {"a.bin": (b"a" * 1000, "supporting")}).json()
    url = urlsplit(started["files"][0]["parts"][0]["url"])
    query = dict(parse_qsl(url.query))
    grant = PartGrant(
        started["uploadId"], 0, 1, int(query["size"]), int(query["partSize"]), int(query["expires"])
    )
    store = services.store
    assert isinstance(store, LocalBlobStore)
    writer = open_part(services, store, grant, query["signature"], "1000")
    staging = services.settings.data_dir / "blobs" / "staging" / started["uploadId"]
    assert not staging.exists()
    writer.write((b"a" * 1000,), checksum=False)
    assert (staging / "0.data").is_file()
    assert ETAG.fullmatch(writer.finish(None))
