"""One contract for every store, both its StagingArea and its ContentStore side: the embedded
LocalBlobStore (its part and download URLs served by the app itself) and S3BlobStore on a
real S3-protocol server (moto, presigned URLs).

Each store is driven through its protocol, with real HTTP PUTs to the part URLs it hands out.
Files are staged by the upload use case (which calls ``stage_file``), so the embedded store's
part route finds its session; everything after that is the store's own methods.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from boto3.s3.transfer import TransferConfig
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.paths import TEST_BASE
from tests.support.s3server import with_s3_bytes
from tracestore.errors import ValidationError
from tracestore.server import db, upload_sessions
from tracestore.server.services import Services
from tracestore.server.settings import MIB, Settings
from tracestore.server.storage.blobs import (
    BlobStore,
    ContentStore,
    FileLargerThanDeclared,
    StagedFile,
    StagingArea,
    normalise_etag,
)
from tracestore.server.storage.local import LocalBlobStore
from tracestore.server.storage.s3 import S3BlobStore

# The store contract does not depend on the database engine: SQLite pass only.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.engine_independent,
]  # the S3 store's contract runs against a moto server

PART = 5 * MIB  # the part size of the test settings


@pytest.fixture(params=["local", "s3"])
def settings(
    request: pytest.FixtureRequest, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    if request.param == "s3":
        return with_s3_bytes(settings, request.getfixturevalue("s3_server"), monkeypatch)
    return settings


@dataclass
class Harness:
    services: Services
    api: TestClient
    transfer: httpx.Client  # no bearer token: a presigned URL is its own grant

    @property
    def store(self) -> BlobStore:
        return self.services.store

    def stage(self, *sizes: int) -> list[StagedFile]:
        body = {
            "name": "contract",
            "files": [
                {"name": f"f{i}.bin", "size": size, "role": "supporting"}
                for i, size in enumerate(sizes)
            ],
        }
        answer = self.api.post("/api/v1/tracesets/upload-url", json=body)
        assert answer.status_code == 200, answer.text
        with self.services.db.session(write=False) as session:
            upload = session.get(db.UploadSession, answer.json()["uploadId"])
            assert upload is not None
            files = session.scalars(
                select(db.TracesetFile)
                .where(db.TracesetFile.traceset_id == upload.traceset_id)
                .order_by(db.TracesetFile.position)
            ).all()
            return [upload_sessions.staged_file(upload, file) for file in files]

    def put(self, staged: StagedFile, number: int, data: bytes) -> httpx.Response:
        expires = self.services.now() + timedelta(hours=1)
        url = self.store.part_url(staged, number, expires, base_url=TEST_BASE)
        return self.transfer.put(url, content=data)

    def put_all(
        self, staged: StagedFile, data: bytes, order: list[int] | None = None
    ) -> dict[int, str]:
        etags: dict[int, str] = {}
        for number in order or range(1, staged.part_count + 1):
            start = (number - 1) * staged.part_size
            answer = self.put(staged, number, data[start : start + staged.part_length(number)])
            assert answer.status_code == 200, answer.text
            etags[number] = answer.headers["etag"]
        return etags

    def commit(self, staged: StagedFile, etags: dict[int, str]) -> str:
        """What completion does: check the parts the store lists, seal, place; the SHA-256."""
        listed = self.store.list_parts([staged])[0]
        assert {n: normalise_etag(p.etag) for n, p in listed.items()} == {
            n: normalise_etag(e) for n, e in etags.items()
        }
        blob = self.store.seal_file(staged, etags)
        self.store.place_file(staged, blob)
        return blob.sha256

    def download(self, sha256: str, filename: str = "rank 0.et") -> httpx.Response:
        expires = self.services.now() + timedelta(minutes=5)
        url = self.store.download_url(
            sha256, filename=filename, expires_at=expires, base_url=TEST_BASE
        )
        return self.transfer.get(url)

    def keys(self, area: str) -> list[str]:
        """What the store keeps in its ``blobs`` or ``staging`` area."""
        store = self.store
        if isinstance(store, LocalBlobStore):
            return sorted(str(p) for p in (store.root / area).rglob("*") if p.is_file())
        assert isinstance(store, S3BlobStore)
        prefix = f"{store.prefix}/{area}/"
        pages = store.client.get_paginator("list_objects_v2").paginate(
            Bucket=store.bucket, Prefix=prefix
        )
        objects = [o["Key"] for page in pages for o in page.get("Contents", [])]
        uploads_open = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=prefix)
        return sorted(objects + [u["Key"] for u in uploads_open.get("Uploads", [])])


@pytest.fixture
def harness(services: Services, http: TestClient) -> Iterator[Harness]:
    store = services.store
    if isinstance(store, S3BlobStore):
        # Small pages and small copy parts, so listing pages and copying by parts are exercised.
        store.list_page_size = 2
        store.copy_config = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART)
        with httpx.Client(trust_env=False, timeout=60) as transfer:
            yield Harness(services, http, transfer)
    else:
        yield Harness(services, http, TestClient(http.app))


def _bytes(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def test_each_store_implements_both_protocols(harness: Harness) -> None:
    store = harness.store
    assert isinstance(store, StagingArea)
    assert isinstance(store, ContentStore)
    assert isinstance(store, BlobStore)


def _as_each_protocol(
    store: LocalBlobStore | S3BlobStore,
) -> tuple[StagingArea, ContentStore, BlobStore]:
    """Never called: mypy checks both stores against each protocol, signatures included
    (``isinstance`` on a runtime-checkable protocol looks at member names only)."""
    return store, store, store


def test_parts_out_of_order_are_listed_and_committed_content_addressed(harness: Harness) -> None:
    data = _bytes(2 * PART + 12345)
    (staged,) = harness.stage(len(data))
    assert staged.part_count == 3
    etags = harness.put_all(staged, data, order=[3, 1, 2])
    listed = harness.store.list_parts([staged])[0]
    assert sorted(listed) == [1, 2, 3]
    assert [listed[n].size for n in (1, 2, 3)] == [PART, PART, 12345]
    sha256 = harness.commit(staged, etags)
    assert sha256 == hashlib.sha256(data).hexdigest()
    assert harness.store.blob_exists(sha256)
    assert sha256 in harness.store.blob_key(sha256)
    assert harness.store.blob_uri(sha256).startswith(("file://", "s3://"))
    with harness.store.open_blob(sha256) as blob:
        assert blob.read() == data
    answer = harness.download(sha256)
    assert answer.status_code == 200 and answer.content == data
    assert answer.headers["content-disposition"] == "attachment; filename*=UTF-8''rank%200.et"
    harness.store.discard_staging([staged])
    assert harness.keys("staging") == []
    assert harness.store.blob_exists(sha256)


def test_identical_bytes_are_stored_once(harness: Harness) -> None:
    data = _bytes(PART + 7)
    first, second = harness.stage(len(data), len(data))
    third = harness.stage(len(data))[0]
    hashes = {harness.commit(s, harness.put_all(s, data)) for s in (first, second, third)}
    assert hashes == {hashlib.sha256(data).hexdigest()}
    assert len(harness.keys("blobs")) == 1


@pytest.mark.parametrize("size", [10, PART + 10])
def test_a_commit_retried_after_a_crash_gives_the_same_blob(harness: Harness, size: int) -> None:
    data = _bytes(size)
    (staged,) = harness.stage(size)
    etags = harness.put_all(staged, data)
    sha256 = harness.commit(staged, etags)
    # The process died before the database recorded the commit: completion runs again.
    assert harness.commit(staged, etags) == sha256
    with harness.store.open_blob(sha256) as blob:
        assert blob.read() == data
    harness.store.discard_staging([staged])
    assert harness.keys("staging") == []
    assert len(harness.keys("blobs")) == 1


def test_discard_staging_removes_every_staged_byte(harness: Harness) -> None:
    data = _bytes(PART + 1)
    (staged,) = harness.stage(len(data))
    harness.put_all(staged, data, order=[2])
    assert sorted(harness.store.list_parts([staged])[0]) == [2]
    harness.store.discard_staging([staged])
    assert harness.store.list_parts([staged])[0] == {}
    assert harness.keys("staging") == []
    harness.store.discard_staging([staged])  # twice is harmless
    assert harness.keys("blobs") == []


def test_a_zero_byte_file_has_one_empty_part(harness: Harness) -> None:
    (staged,) = harness.stage(0)
    assert (staged.part_count, staged.part_length(1)) == (1, 0)
    etags = harness.put_all(staged, b"")
    assert harness.store.list_parts([staged])[0][1].size == 0
    sha256 = harness.commit(staged, etags)
    assert sha256 == hashlib.sha256(b"").hexdigest()
    with harness.store.open_blob(sha256) as blob:
        assert blob.read() == b""
    answer = harness.download(sha256)
    assert answer.status_code == 200 and answer.content == b""


def test_a_part_of_the_wrong_size_is_never_taken_for_the_right_one(harness: Harness) -> None:
    (staged,) = harness.stage(PART + 100)
    for wrong in (b"x" * 101, b"x" * 99):
        answer = harness.put(staged, 2, wrong)
        listed = harness.store.list_parts([staged])[0]
        if answer.status_code == 200:
            # A store that takes it (moto checks no signature) must list its true size, so
            # completion refuses it; real S3 refuses the PUT (its Content-Length is signed).
            assert listed[2].size == len(wrong)
        else:
            assert answer.status_code in (400, 403, 413), answer.text
            assert 2 not in listed
    if isinstance(harness.store, S3BlobStore):
        expires = harness.services.now() + timedelta(hours=1)
        url = harness.store.part_url(staged, 2, expires, base_url=TEST_BASE)
        signed = parse_qs(urlparse(url).query)["X-Amz-SignedHeaders"][0].split(";")
        assert "content-length" in signed


def test_committing_more_bytes_than_declared_is_refused(harness: Harness) -> None:
    (staged,) = harness.stage(10)
    answer = harness.put(staged, 1, b"x" * 11)
    if answer.status_code != 200:
        assert answer.status_code == 413
        pytest.skip("this store refuses an oversize part at PUT time")
    with pytest.raises(FileLargerThanDeclared) as refused:
        harness.store.seal_file(staged, {1: answer.headers["etag"]})
    assert refused.value.size == 11  # the true byte count, for completion's message
    harness.store.discard_staging([staged])
    assert harness.keys("staging") == [] and harness.keys("blobs") == []


def test_open_blob_reads_from_where_it_seeks(harness: Harness) -> None:
    data = _bytes(3 * MIB + 5)
    (staged,) = harness.stage(len(data))
    sha256 = harness.commit(staged, harness.put_all(staged, data))
    with harness.store.open_blob(sha256) as blob:
        assert blob.seekable()
        blob.seek(-5, 2)
        assert blob.read() == data[-5:]
        blob.seek(MIB)
        assert blob.read(10) == data[MIB : MIB + 10]
        assert blob.tell() == MIB + 10
    harness.store.delete_blob(sha256)
    assert not harness.store.blob_exists(sha256)
    with pytest.raises(FileNotFoundError):  # what validation reports as a missing blob
        harness.store.open_blob(sha256)
    harness.store.check()


def test_staged_uploads_names_the_sessions_holding_staged_bytes(harness: Harness) -> None:
    store = harness.store
    first, second = harness.stage(10), harness.stage(PART + 1)
    harness.put_all(first[0], _bytes(10))
    harness.put_all(second[0], _bytes(PART + 1))
    upload_ids = {first[0].upload_id, second[0].upload_id}
    assert set(store.staged_uploads()) == upload_ids
    store.discard_staging(first + second)  # files of two uploads in one call
    assert set(store.staged_uploads()) == set()


def test_discard_upload_removes_an_upload_known_only_by_its_id(harness: Harness) -> None:
    store = harness.store
    orphan = harness.stage(10, PART + 1)
    kept = harness.stage(10)
    harness.put_all(orphan[1], _bytes(PART + 1))
    harness.put_all(kept[0], _bytes(10))
    store.discard_upload(orphan[0].upload_id)
    assert set(store.staged_uploads()) == {kept[0].upload_id}
    assert all(store.list_parts([staged])[0] == {} for staged in orphan)
    store.discard_upload(orphan[0].upload_id)  # harmless when there is nothing left
    store.discard_staging([kept[0]])
    harness.store.check()


# --- S3: completion cut off between its steps, then retried ---


def _s3(harness: Harness) -> S3BlobStore:
    if not isinstance(harness.store, S3BlobStore):
        pytest.skip("S3-specific crash points")
    return harness.store


@pytest.mark.parametrize("crash_in", ["_hash_object", "_copy"])
def test_s3_commit_cut_off_after_completing_the_multipart_upload(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, crash_in: str
) -> None:
    store = _s3(harness)
    data = _bytes(PART + 3)
    (staged,) = harness.stage(len(data))
    etags = harness.put_all(staged, data)
    original = getattr(store, crash_in)

    def dies_after(*args: Any, **kwargs: Any) -> Any:
        if crash_in == "_copy":
            original(*args, **kwargs)
        raise SystemExit("killed")

    monkeypatch.setattr(store, crash_in, dies_after)
    with pytest.raises(SystemExit):
        harness.commit(staged, etags)
    monkeypatch.setattr(store, crash_in, original)
    # S3 forgot the parts when the upload completed; the manifest still answers for them.
    assert {n: p.size for n, p in store.list_parts([staged])[0].items()} == {1: PART, 2: 3}
    sha256 = harness.commit(staged, etags)
    assert sha256 == hashlib.sha256(data).hexdigest()
    assert harness.download(sha256).content == data
    harness.store.discard_staging([staged])
    assert harness.keys("staging") == []
    assert len(harness.keys("blobs")) == 1


def test_s3_blob_urls_name_the_bucket_and_prefix() -> None:
    sha256 = "ab" + "0" * 62
    store = S3BlobStore.from_url("s3://bucket/some/prefix/", endpoint_url="http://127.0.0.1:9")
    assert store.blob_key(sha256) == f"some/prefix/blobs/ab/{sha256}"
    assert store.blob_uri(sha256) == f"s3://bucket/some/prefix/blobs/ab/{sha256}"
    assert S3BlobStore.from_url("s3://bucket").blob_key(sha256) == f"blobs/ab/{sha256}"
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        S3BlobStore.from_url("s3:///prefix")
    with pytest.raises(ValidationError, match="Invalid blob id"):
        store.blob_key("../../etc")
    with pytest.raises(ValidationError, match="Invalid upload id"):
        store.stage_file("../x", 0, 1, PART, None)
