"""Lazy staging: sessions none (or some) of whose files' parts ever arrived, through the
resume, completion and the sweeper."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import FakeClock
from tests.uploading import complete, put_parts, request_upload
from tracestore.server.lifecycle import sweep
from tracestore.server.services import Services


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
    assert refused.status_code == 400, refused.text
    assert "never received" in refused.json()["error"]["message"]
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
