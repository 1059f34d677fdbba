"""upload-url's Core inserts: odd but valid declarations read back exactly (both engines)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.support.uploading import UPLOAD_URL


def _start(http: TestClient, **body: Any) -> dict[str, Any]:
    response = http.post(UPLOAD_URL, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_odd_declarations_read_back_exactly(http: TestClient) -> None:
    metadata: dict[str, Any] = {
        "shape": {"rankCount": 1},
        "note": None,
        "\u00fcn\u00efcode": "\u2603 \U0001f600",
        "n": 1.50,
        "big": 12345678901234567890,
        "list": [None, {}, []],
    }
    files = [
        {"name": "dir/x+y=z@1.bin", "size": 0, "role": "supporting"},
        {"name": "rank_0.json", "size": 5, "role": "primary", "contentType": None},
    ]
    answer = _start(
        http,
        name="n\u00e4me \U0001f600",
        description="d\u00e9scription\nline 2",
        tags=["x", "\u00fc", "\u2603 tag"],
        ttlDays=3,
        workloadMetadata=metadata,
        files=files,
    )
    assert [(f["name"], f["size"]) for f in answer["files"]] == [
        ("dir/x+y=z@1.bin", 0),
        ("rank_0.json", 5),
    ]
    assert answer["expiresAt"].endswith("Z")
    view = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert view["name"] == "n\u00e4me \U0001f600"
    assert view["description"] == "d\u00e9scription\nline 2"
    assert view["tags"] == ["x", "\u00fc", "\u2603 tag"]
    assert view["ttlDays"] == 3
    assert view["workloadMetadata"] == metadata
    assert view["status"] == "uploading"
    resumed = http.get(f"{UPLOAD_URL}/{answer['uploadId']}").json()
    assert resumed["expiresAt"] == answer["expiresAt"]
    assert [f["name"] for f in resumed["files"]] == [f["name"] for f in answer["files"]]
    assert [f["parts"][0]["size"] for f in resumed["files"]] == [0, 5]


def test_null_declarations_read_back_as_null(http: TestClient) -> None:
    answer = _start(
        http,
        name="nulls",
        description=None,
        tags=[],
        workloadMetadata=None,
        files=[{"name": "a.bin", "size": 1, "role": "supporting"}],
    )
    view = http.get(f"/api/v1/tracesets/{answer['tracesetId']}").json()
    assert view["description"] is None
    assert view["tags"] == []
    assert view["workloadMetadata"] is None


def test_core_inserts_store_nulls_as_the_unit_of_work_did(http: TestClient, services: Any) -> None:
    """Absent metadata is JSON null in workload_metadata (as the ORM's flush wrote it before
    1a4e2d9, checked on both engines) and SQL NULL in every column upload-url leaves unset."""
    answer = _start(
        http,
        name="raw",
        workloadMetadata=None,
        files=[{"name": "a", "size": 1, "role": "supporting"}],
    )
    with services.db.session(write=False) as session:
        traceset = session.execute(
            text(
                "select workload_metadata is null, metadata_text is null, inspection is null,"
                " description is null, deleted_at is null, hash is null"
                " from tracesets where id = :i"
            ),
            {"i": answer["tracesetId"]},
        ).one()
        file = session.execute(
            text(
                "select inspection is null, sha256 is null, rank_start is null"
                " from traceset_files where traceset_id = :i"
            ),
            {"i": answer["tracesetId"]},
        ).one()
        upload = session.execute(
            text(
                "select lease_until is null, completed_at is null"
                " from upload_sessions where id = :i"
            ),
            {"i": answer["uploadId"]},
        ).one()
    assert [bool(v) for v in traceset] == [False, True, True, True, True, True]
    assert [bool(v) for v in (*file, *upload)] == [True] * 5
