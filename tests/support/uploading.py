"""Test helpers that drive an upload through raw HTTP, as a client of another language would."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from tests.support.paths import TEST_BASE
from tracestore import schemas
from tracestore.client import Client
from tracestore.server import completion, db
from tracestore.server.auth import authenticate_api_token
from tracestore.server.services import Services
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.staging import DATA_FILE

UPLOAD_URL = "/api/v1/tracesets/upload-url"
COMPLETE_URL = "/api/v1/tracesets/upload-url/complete"


def checksum_b64(data: bytes) -> str:
    """``data``'s SHA-256 as a part PUT's ``x-amz-checksum-sha256`` header gives it."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def request_upload(
    http: httpx.Client, files: dict[str, tuple[bytes, str]], metadata: Any = None, **extra: Any
) -> httpx.Response:
    body: dict[str, Any] = {
        "name": extra.pop("name", "test traceset"),
        "files": [
            {"name": n, "size": len(data), "role": role} for n, (data, role) in files.items()
        ],
        **extra,
    }
    if metadata is not None:
        body["workloadMetadata"] = metadata
    return http.post(UPLOAD_URL, json=body)


def put_parts(
    http: httpx.Client, answer: dict[str, Any], files: dict[str, tuple[bytes, str]]
) -> dict[str, list[dict[str, Any]]]:
    """PUT every part of every file (in reverse order); the ETags per file name."""
    etags: dict[str, list[dict[str, Any]]] = {}
    part_size = answer["partSize"]
    for entry in answer["files"]:
        data = files[entry["name"]][0]
        for part in reversed(entry["parts"]):
            offset = (part["partNumber"] - 1) * part_size
            response = http.put(part["url"], content=data[offset : offset + part["size"]])
            assert response.status_code == 200, response.text
            etags.setdefault(entry["name"], []).append(
                {"partNumber": part["partNumber"], "etag": response.headers["etag"]}
            )
    return etags


def one_part_upload(http: httpx.Client, data: bytes) -> dict[str, Any]:
    """A one-file, one-part upload started: upload-url's answer."""
    response = request_upload(http, {"r.et": (data, "primary")}, {"shape": {"rankCount": 1}})
    assert response.status_code == 200
    return dict(response.json())


def read_back(http: httpx.Client, services: Services, sha256: str) -> bytes:
    """A stored blob's bytes, through the local store's download URL."""
    store = services.store
    assert isinstance(store, LocalBlobStore)
    expires = services.now() + timedelta(minutes=5)
    url = store.download_url(sha256, filename="x", expires_at=expires, base_url=TEST_BASE)
    response = http.get(url)
    assert response.status_code == 200, response.text
    return bytes(response.content)


def one_part_session(client: Client, data: bytes) -> tuple[str, str]:
    """A one-file (supporting) upload started through the client's low-level calls, its
    only part sent; the upload id and the part's ETag."""
    session = client.start_upload(
        schemas.TracesetUploadUrlRequest(
            name="low level",
            files=[schemas.UploadFileSpec(name="a.bin", size=len(data), role="supporting")],
        )
    )
    (part,) = session.files[0].parts
    return session.upload_id, client.http.put(part.url, content=data).headers["etag"].strip('"')


def complete(
    http: httpx.Client,
    upload_id: str,
    etags: dict[str, list[dict[str, Any]]],
    sha256: dict[str, str] | None = None,
) -> httpx.Response:
    """Complete with the given ETags per file (and, for the files named, their SHA-256)."""
    hashes = sha256 or {}
    return http.post(
        COMPLETE_URL,
        json={
            "uploadId": upload_id,
            "files": [
                {"name": name, "parts": parts}
                | ({"sha256": hashes[name]} if name in hashes else {})
                for name, parts in etags.items()
            ],
        },
    )


def complete_in_a_process_that_dies(
    http: httpx.Client,
    services: Services,
    upload_id: str,
    etags: dict[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run a completion in this process as the caller of ``http``, as a process that is
    killed would: its lease is never released. The caller makes it die (SystemExit)."""
    with services.db.session(write=False) as session:
        principal = authenticate_api_token(
            session, http.headers["Authorization"].split()[1], services.now()
        )
    request = schemas.CompleteRequest.model_validate(
        {"uploadId": upload_id, "files": [{"name": n, "parts": p} for n, p in etags.items()]}
    )
    monkeypatch.setattr(completion, "_release_lease", lambda *a: None)
    with pytest.raises(SystemExit):
        completion.complete_upload(services, principal, request)


def upload(
    http: httpx.Client, files: dict[str, tuple[bytes, str]], metadata: Any = None, **extra: Any
) -> dict[str, Any]:
    """The whole flow; the completed traceset as JSON."""
    started = request_upload(http, files, metadata, **extra)
    assert started.status_code == 200, started.text
    answer = started.json()
    done = complete(http, answer["uploadId"], put_parts(http, answer, files))
    assert done.status_code == 201, done.text
    return dict(done.json())


def raw_post(http: httpx.Client, url: str, text: str) -> httpx.Response:
    return http.post(url, content=text.encode(), headers={"Content-Type": "application/json"})


def record_counts(services: Services) -> dict[str, int]:
    """How many records of each kind exist, and how many staged or stored byte files, once
    the background work handed over so far is done (it removes completed uploads' staging;
    walking the tree while it runs would see entries vanish). A staged file's ``data`` is
    not counted: its first part PUT makes it, whether or not that part is then kept."""
    services.wait_for_background()
    counts: dict[str, int] = {}
    with services.db.session(write=False) as session:
        for table in (db.Traceset, db.TracesetFile, db.UploadSession, db.Blob):
            counts[table.__tablename__] = (
                session.scalar(select(func.count()).select_from(table)) or 0
            )
    root = services.settings.data_dir / "blobs"
    staged_data = (root / "staging").glob(f"*/*.{DATA_FILE}")
    counts["files on disk"] = (
        sum(1 for p in root.rglob("*") if p.is_file()) - sum(1 for _ in staged_data)
        if root.exists()
        else 0
    )
    return counts


def metadata_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
