"""The streaming ZIP writer, read back by the standard ``zipfile`` module: empty and nested
members, more entries than a plain ZIP can count, and (slow) a traceset holding a file over
4 GiB, kept fast by sparse files on both sides."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from tests.support.clock import FakeClock
from tests.support.paths import TEST_BASE
from tests.support.s3server import MotoServer, with_s3_bytes
from tests.support.uploading import complete, put_parts, request_upload, upload
from tracestore.server import db
from tracestore.server.app import create_app
from tracestore.server.archive import (
    ArchiveEntry,
    ArchiveSourceError,
    archive_size,
    stream_zip,
)
from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
from tracestore.server.downloads import archive_url, open_archive
from tracestore.server.services import Services, build_services
from tracestore.server.settings import Settings
from tracestore.server.storage.local import LocalBlobStore

# Archive and blob-store logic does not touch the database engine: SQLite pass only.
pytestmark = pytest.mark.engine_independent

MOMENT = datetime(2026, 3, 4, 5, 6, 8, tzinfo=UTC)
GIB = 1024**3
MIB = 1024**2


def _entry(name: str, data: bytes) -> ArchiveEntry:
    return ArchiveEntry(name, len(data), lambda: io.BytesIO(data), MOMENT)


def _zip(entries: list[ArchiveEntry], chunk_size: int = 1024) -> bytes:
    out = b"".join(stream_zip(entries, chunk_size=chunk_size))
    assert len(out) == archive_size(entries)
    return out


def test_members_read_back_byte_exact_with_names_sizes_and_times() -> None:
    members = {
        "empty.log": b"",
        "a/b/c/nested.json": b'{"rank": 3}',
        "unicode-\u00e9.txt": "d\u00e9j\u00e0 vu".encode(),
        "big.bin": os.urandom(10_000),  # many chunks at chunk_size 1024
        "twice.bin": b"same bytes",
        "again/twice.bin": b"same bytes",
    }
    archive = zipfile.ZipFile(io.BytesIO(_zip([_entry(n, d) for n, d in members.items()])))
    assert archive.testzip() is None
    assert archive.namelist() == list(members)
    for name, data in members.items():
        info = archive.getinfo(name)
        assert archive.read(name) == data
        assert (info.file_size, info.compress_size) == (len(data), len(data))
        assert info.compress_type == zipfile.ZIP_STORED
        assert info.date_time == (2026, 3, 4, 5, 6, 8)
        assert info.external_attr >> 16 == 0o100644


def test_an_empty_archive_is_a_valid_zip() -> None:
    assert zipfile.ZipFile(io.BytesIO(_zip([]))).namelist() == []


@pytest.mark.slow
def test_more_entries_than_a_plain_zip_can_count_uses_zip64_end_records() -> None:
    entries = [_entry(f"ranks/{i:05d}.et", str(i).encode()) for i in range(70_000)]
    data = _zip(entries, chunk_size=1 << 20)
    assert b"PK\x06\x06" in data[-200:]  # zip64 end of central directory
    archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    assert len(infos) == 70_000
    for i in (0, 1, 65_534, 65_535, 65_536, 69_999):
        assert archive.read(infos[i]) == str(i).encode()


def test_a_member_shorter_or_longer_than_declared_cuts_the_archive_short() -> None:
    short = ArchiveEntry("short.bin", 10, lambda: io.BytesIO(b"12345"), MOMENT)
    with pytest.raises(ArchiveSourceError, match=r"short.bin: 5 bytes read, 10 expected"):
        b"".join(stream_zip([short]))
    long = ArchiveEntry("long.bin", 3, lambda: io.BytesIO(b"12345"), MOMENT)
    with pytest.raises(ArchiveSourceError, match=r"long.bin: longer than 3 bytes"):
        b"".join(stream_zip([long]))


def test_archive_streams_through_the_service_when_the_bytes_are_in_s3(
    settings: Settings,
    clock: FakeClock,
    s3_server: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 cannot zip: the archive URL is the service's own, reading each object in chunks."""
    s3 = build_services(with_s3_bytes(settings, s3_server, monkeypatch), clock=clock)
    try:
        bootstrap(s3.db, s3.settings.data_dir, clock())
        token = (s3.settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()
        files = {
            "empty.log": (b"", "supporting"),
            "a/b/nested.bin": (os.urandom(5 * MIB + 99), "supporting"),  # two parts
        }
        with TestClient(create_app(services=s3), raise_server_exceptions=False) as http:
            http.headers["Authorization"] = f"Bearer {token}"
            started = request_upload(http, files).json()
            with httpx.Client(trust_env=False, timeout=60) as direct:  # parts go to S3 itself
                etags = put_parts(direct, started, files)
            done = complete(http, started["uploadId"], etags)
            assert done.status_code == 201, done.text
            ts = done.json()
            url = http.get(f"/api/v1/tracesets/{ts['id']}/download").json()["url"]
            assert url.startswith(f"http://testserver/blobs/archive/{ts['id']}?")
            response = http.get(url, headers={"Authorization": ""})
        assert response.status_code == 200, response.text
        archive = zipfile.ZipFile(io.BytesIO(response.content))
        assert archive.testzip() is None
        assert {n: archive.read(n) for n in archive.namelist()} == {
            n: d for n, (d, _) in files.items()
        }
    finally:
        s3.close()


def _sparse_file(path: Path, size: int, islands: dict[int, bytes]) -> str:
    """A sparse file of ``size`` bytes, zero but for ``islands``; its SHA-256 hex."""
    with open(path, "wb") as out:
        out.truncate(size)
        for offset, data in islands.items():
            out.seek(offset)
            out.write(data)
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(16 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.mark.slow
def test_traceset_with_a_file_over_4_gib_archives_and_unpacks_identically(
    http: TestClient, services: Services, tmp_path: Path
) -> None:
    small = {
        "empty.log": (b"", "supporting"),
        "nested/dir/after.json": (b'{"after": "the big one"}', "supporting"),
    }
    ts = upload(http, small)
    store = services.store
    assert isinstance(store, LocalBlobStore)

    # Put a > 4 GiB blob into the store as a sparse file and list it between the others,
    # so the member after it starts past 4 GiB too (zip64 sizes and offsets).
    big_size = 4 * GIB + 3 * MIB + 17
    islands = {0: os.urandom(MIB), 2 * GIB: os.urandom(MIB), big_size - MIB: os.urandom(MIB)}
    staged = tmp_path / "big.sparse"
    sha256 = _sparse_file(staged, big_size, islands)
    target = store.root / store.blob_key(sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)
    now = services.now()
    with services.db.session() as session:
        session.add(db.Blob(sha256=sha256, size=big_size, created_at=now))
        session.execute(
            update(db.TracesetFile)
            .where(db.TracesetFile.traceset_id == ts["id"], db.TracesetFile.position == 1)
            .values(position=2)
        )
        session.add(
            db.TracesetFile(
                traceset_id=ts["id"],
                position=1,
                name="ranks/huge.bin",
                size=big_size,
                role="supporting",
                sha256=sha256,
                metadata_status="complete",
            )
        )

    expires = int(services.now().timestamp()) + 600
    url = archive_url(services, ts["id"], expires, TEST_BASE)
    signature = url.rpartition("signature=")[2]
    archive = open_archive(services, ts["id"], expires, signature)
    out_path = tmp_path / "out.zip"
    written = 0
    with open(out_path, "wb") as out:
        for chunk in archive.chunks:
            # Keep the output sparse too: skip runs of zeros instead of writing them.
            if chunk.count(0) == len(chunk):
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
            written += len(chunk)
        out.truncate(written)
    assert written == archive.size == out_path.stat().st_size

    with zipfile.ZipFile(out_path) as unpacked:
        assert unpacked.namelist() == ["empty.log", "ranks/huge.bin", "nested/dir/after.json"]
        assert unpacked.read("empty.log") == b""
        assert unpacked.read("nested/dir/after.json") == small["nested/dir/after.json"][0]
        assert unpacked.getinfo("nested/dir/after.json").header_offset > 4 * GIB
        info = unpacked.getinfo("ranks/huge.bin")
        assert info.file_size == big_size
        digest = hashlib.sha256()
        with unpacked.open(info) as member:  # zipfile checks the CRC-32 at the end
            while chunk := member.read(16 * MIB):
                digest.update(chunk)
        assert digest.hexdigest() == sha256
