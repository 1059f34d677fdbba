"""Input a hostile client sends on purpose: every piece of it gets a 4xx with the error
envelope (never a 500), an error message never echoes a huge value whole, and nothing stored
is lost. Each test reproduces a finding of the attack on the service (issue 15)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support import crafted
from tests.support.envelopes import assert_error
from tests.support.uploading import (
    COMPLETE_URL,
    UPLOAD_URL,
    complete,
    put_parts,
    raw_post,
    record_counts,
    request_upload,
    upload,
)
from tracestore import schemas
from tracestore.client import Client
from tracestore.client.downloader import Downloader
from tracestore.client.local_files import check_names, collect_files
from tracestore.client.retries import RetryPolicy
from tracestore.errors import ValidationError
from tracestore.server import lifecycle
from tracestore.server.app import create_app
from tracestore.server.auth import ADMIN_TOKEN_FILE, bootstrap
from tracestore.server.services import Services, build_services
from tracestore.server.settings import MIB, Settings

SUPPORTING = {"a.bin": (b"x" * 100, "supporting")}


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


def _started(http: TestClient) -> dict[str, Any]:
    response = request_upload(http, SUPPORTING)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_non_ascii_part_signature_is_forbidden(http: TestClient) -> None:
    url = _started(http)["files"][0]["parts"][0]["url"]
    response = http.put(_with_query(url, signature="é" * 43), content=b"x" * 100)
    assert "does not match" in assert_error(response, 403, "FORBIDDEN")["message"]


def test_a_non_ascii_checksum_is_a_validation_error(http: TestClient) -> None:
    url = _started(http)["files"][0]["parts"][0]["url"]
    response = http.put(url, content=b"x" * 100, headers={"x-amz-checksum-sha256": "é".encode()})
    assert "x-amz-checksum-sha256" in assert_error(response, 400, "VALIDATION_ERROR")["message"]


def test_non_ascii_blob_and_archive_signatures_are_forbidden(http: TestClient) -> None:
    traceset = upload(http, SUPPORTING)
    api = f"/api/v1/tracesets/{traceset['id']}/download"
    for params in ({"file": "a.bin"}, {}):
        url = http.get(api, params=params).json()["url"]
        response = http.get(_with_query(url, signature="ü"))
        assert_error(response, 403, "FORBIDDEN")


@pytest.mark.parametrize("depth", [200, 1_000, 100_000])
def test_deeply_nested_metadata_is_a_validation_error(http: TestClient, depth: int) -> None:
    body = (
        '{"name":"deep","files":[{"name":"a","size":1,"role":"supporting"}],'
        f'"workloadMetadata":{"[" * depth}{"]" * depth}}}'
    )
    response = raw_post(http, UPLOAD_URL, body)
    message = assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert "levels deep" in message


def test_nesting_of_real_metadata_is_accepted(http: TestClient) -> None:
    nested: Any = {"shape": {"rankCount": 1}}
    extra: Any = "leaf"
    for _ in range(25):  # 50 levels, with the body around it near the limit of 64
        extra = {"x": [extra]}
    nested["extra"] = extra
    response = request_upload(http, SUPPORTING, nested)
    assert response.status_code == 200, response.text


def test_the_download_url_of_a_purged_blob_is_gone(
    http: TestClient, services: Services, clock: Any
) -> None:
    traceset = upload(http, SUPPORTING)
    url = http.get(f"/api/v1/tracesets/{traceset['id']}/download", params={"file": "a.bin"}).json()[
        "url"
    ]
    assert http.delete(f"/api/v1/tracesets/{traceset['id']}").status_code == 204
    clock.advance(seconds=services.settings.purge_grace.total_seconds() + 1)
    assert lifecycle.sweep(services).purged_blobs == 1
    # Back to when the URL was signed: it has not expired, only its bytes are gone.
    clock.advance(seconds=-(services.settings.purge_grace.total_seconds() + 1))
    response = http.get(url)
    assert "no longer stored" in assert_error(response, 410, "GONE")["message"]


def test_an_unexpected_error_answers_500_with_connection_close(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = _started(http)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(services.store, "list_parts", broken)
    response = http.get(f"{UPLOAD_URL}/{answer['uploadId']}")
    assert_error(response, 500, "INTERNAL_ERROR")
    assert response.headers["connection"] == "close"
    assert "disk went away" not in response.text


def test_a_huge_etag_is_not_echoed_whole(http: TestClient) -> None:
    answer = _started(http)
    etags = put_parts(http, answer, SUPPORTING)
    etags["a.bin"][0]["etag"] = "e" * 1_000_000
    response = complete(http, answer["uploadId"], etags)
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert len(error["message"]) < 1_000
    assert len(response.content) < 2_000


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a", "a/b"),
        ("a/b/c", "a/b"),
        ("a.txt", "A.txt"),
        ("Dir/x", "dir/X"),
        ("A", "a/b"),
    ],
)
def test_names_that_collide_on_disk_are_refused_naming_both(
    http: TestClient, services: Services, first: str, second: str
) -> None:
    files = {first: (b"1", "supporting"), second: (b"2", "supporting")}
    response = request_upload(http, files)
    message = assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert repr(first) in message and repr(second) in message
    assert record_counts(services)["tracesets"] == 0


def test_names_that_only_share_a_directory_are_accepted(http: TestClient) -> None:
    files = {n: (b"1", "supporting") for n in ("a/b", "a/c", "A/d", "ab", "a.b/c")}
    assert request_upload(http, files).status_code == 200


def test_the_client_refuses_colliding_names_before_any_request(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "run.json").write_text("{}")
    files = collect_files([tmp_path / "x"], "supporting")
    files.append(dataclasses.replace(files[0], name="RUN.json"))
    with pytest.raises(ValidationError, match="differ only by case"):
        check_names(files)


def test_downloading_a_stored_colliding_pair_is_a_clear_error(tmp_path: Path) -> None:
    def entry(name: str) -> schemas.FileResponse:
        return schemas.FileResponse(
            name=name, size=1, role="supporting", metadata_status="complete"
        )

    downloader = Downloader(httpx.Client(), RetryPolicy(), lambda *_: pytest.fail("no request"))
    with pytest.raises(ValidationError, match="cannot be a file and a directory"):
        downloader.fetch_all("ts_x", [entry("a"), entry("a/b")], tmp_path, 1, None)
    assert list(tmp_path.iterdir()) == []


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_database_and_the_stored_bytes_are_private_to_the_service(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", part_size=5 * MIB, public_url="http://t")
    services = build_services(settings)
    try:
        bootstrap(services.db, settings.data_dir, services.now())
        token = (settings.data_dir / ADMIN_TOKEN_FILE).read_text().strip()
        with TestClient(create_app(services=services)) as http:
            http.headers["Authorization"] = f"Bearer {token}"
            answer = _started(http)
            etags = put_parts(http, answer, SUPPORTING)
            staged = {
                p: (p.is_dir(), _mode(p))
                for p in (settings.data_dir / "blobs" / "staging").rglob("*")
            }
            complete(http, answer["uploadId"], etags)
            services.wait_for_background()
    finally:
        services.close()
    data = settings.data_dir
    assert _mode(data) == 0o700
    assert _mode(data / "tracestore.db") == 0o600
    stored = list((data / "blobs").rglob("*"))
    assert any(not is_dir for is_dir, _ in staged.values())
    assert all(mode == (0o700 if is_dir else 0o600) for is_dir, mode in staged.values())
    assert any(p.is_file() for p in stored)
    for path in [data / "blobs", *stored]:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path


def test_an_upload_larger_in_all_than_the_limit_is_refused_with_nothing_stored(
    http: TestClient, services: Services
) -> None:
    body = {
        "name": "huge",
        "files": [{"name": f"f{i}", "size": 5 * 1024**4, "role": "supporting"} for i in range(50)],
    }
    response = http.post(UPLOAD_URL, json=body)
    message = assert_error(response, 413, "PAYLOAD_TOO_LARGE")["message"]
    assert str(services.settings.max_upload_size) in message
    assert record_counts(services)["tracesets"] == 0
    assert list(services.store.staged_uploads()) == []


def test_the_largest_upload_the_defaults_allow_answers_a_few_megabytes(http: TestClient) -> None:
    # One 5 TiB file: about 10,000 parts (the part size grows to keep within 10,000), each
    # with its URL in the first page.
    body = {"name": "largest", "files": [{"name": "f", "size": 5 * 1024**4, "role": "supporting"}]}
    response = http.post(UPLOAD_URL, json=body)
    assert response.status_code == 200, response.text
    assert len(response.json()["files"][0]["parts"]) > 9_900
    assert len(response.content) < 4_000_000


def test_part_urls_come_in_bounded_pages(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services.settings, "part_urls_per_answer", 6)
    part = services.settings.part_size
    sizes = {"big": 20 * part, "small": 10, "mid": 3 * part}
    body = {
        "name": "paged",
        "files": [{"name": n, "size": s, "role": "supporting"} for n, s in sizes.items()],
    }
    answer = http.post(UPLOAD_URL, json=body).json()
    listed = {f["name"]: [p["partNumber"] for p in f["parts"]] for f in answer["files"]}
    assert listed == {"big": [1, 2], "small": [1], "mid": [1, 2]}
    small = next(f for f in answer["files"] if f["name"] == "small")
    assert http.put(small["parts"][0]["url"], content=b"s" * 10).status_code == 200
    resumed = http.get(f"{UPLOAD_URL}/{answer['uploadId']}").json()
    listed = {f["name"]: [p["partNumber"] for p in f["parts"]] for f in resumed["files"]}
    assert listed == {"big": [1, 2, 3], "small": [], "mid": [1, 2, 3]}
    page = http.get(
        f"{UPLOAD_URL}/{answer['uploadId']}", params={"file": "big", "fromPart": 5}
    ).json()
    assert [(f["name"], [p["partNumber"] for p in f["parts"]]) for f in page["files"]] == [
        ("big", [5, 6, 7, 8, 9, 10])
    ]
    unknown = http.get(f"{UPLOAD_URL}/{answer['uploadId']}", params={"file": "nope"})
    assert_error(unknown, 404, "NOT_FOUND")


def test_the_client_follows_pages_of_part_urls(
    http: TestClient,
    services: Services,
    admin_token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(services.settings, "part_urls_per_answer", 1)
    part = services.settings.part_size
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.bin").write_bytes(os.urandom(3 * part + 5))
    (source / "b.bin").write_bytes(os.urandom(part + 1))
    pages: list[tuple[str | None, int]] = []
    with Client("http://testserver", admin_token, http=http) as client:
        original = client.resume_upload

        def resume(upload_id: str, file: str | None = None, from_part: int = 1) -> Any:
            pages.append((file, from_part))
            return original(upload_id, file, from_part)

        monkeypatch.setattr(client, "resume_upload", resume)
        traceset = client.upload_traceset(source, role="supporting", concurrency=2)
        assert traceset.status == "ready"
        copy = tmp_path / "copy"
        client.download_traceset(traceset.id, copy)
    assert sorted(pages) == [("a.bin", 2), ("a.bin", 3), ("a.bin", 4), ("b.bin", 2)]
    for name in ("a.bin", "b.bin"):
        assert (copy / name).read_bytes() == (source / name).read_bytes()


NUL_METADATA = {"shape": {"rankCount": 1}, "note\u0000key": "a\u0000b", "escaped": "\\u0000"}


def test_metadata_holding_a_nul_character_is_stored_and_answered_exactly(
    http: TestClient,
) -> None:
    """PostgreSQL's jsonb cannot hold U+0000 (a 500 there, found by the promotion property
    test): the exact text keeps it, the queryable copy does not need it."""
    done = upload(http, SUPPORTING, NUL_METADATA)
    assert done["workloadMetadata"] == NUL_METADATA
    got = http.get(f"/api/v1/tracesets/{done['id']}")
    assert got.status_code == 200, got.text
    assert got.json()["workloadMetadata"] == NUL_METADATA
    listed = http.get("/api/v1/tracesets", params={"escaped": "\\u0000"})
    assert [t["id"] for t in listed.json()["items"]] == [done["id"]]

    promoted = http.post(
        f"/api/v1/tracesets/{done['id']}/promote",
        json={
            "target": "tenant",
            "workloadMetadata": {**NUL_METADATA, "more": "\u0000"},
            "force": True,  # supporting files only, for a declared rank: its census fails
        },
    )
    assert promoted.status_code == 200, promoted.text
    again = http.get(f"/api/v1/tracesets/{done['id']}").json()
    assert again["workloadMetadata"] == {**NUL_METADATA, "more": "\u0000"}


NUL_LOOKUPS = [
    ("GET", "/api/v1/tracesets/ts_a%00b"),
    ("DELETE", "/api/v1/tracesets/ts_a%00b"),
    ("GET", "/api/v1/tracesets/ts_a%00b/download"),
    ("GET", "/api/v1/tracesets/ts_a%00b/resolve"),
    ("POST", "/api/v1/tracesets/ts_a%00b/validate"),
    ("POST", "/api/v1/tracesets/ts_a%00b/promote"),
    ("GET", "/api/v1/tracesets/upload-url/upload_a%00b"),
    ("GET", "/api/v1/libraries/lib_a%00b"),
]


@pytest.mark.parametrize(("method", "path"), NUL_LOOKUPS)
def test_an_id_holding_a_nul_character_is_not_found(
    http: TestClient, method: str, path: str
) -> None:
    """PostgreSQL's text cannot hold U+0000: psycopg refused the lookup (a 500 there)."""
    response = http.request(method, path, **({"json": {}} if method == "POST" else {}))
    assert "not found" in assert_error(response, 404, "NOT_FOUND")["message"]


def test_a_file_or_upload_named_with_a_nul_character_is_not_found(http: TestClient) -> None:
    done = upload(http, SUPPORTING)
    got = http.get(f"/api/v1/tracesets/{done['id']}/download", params={"file": "a\u0000b"})
    assert "not found" in assert_error(got, 404, "NOT_FOUND")["message"]
    started = _started(http)
    resumed = http.get(
        f"/api/v1/tracesets/upload-url/{started['uploadId']}",
        params={"file": "a\u0000b", "fromPart": "2"},
    )
    assert "not part of upload" in assert_error(resumed, 404, "NOT_FOUND")["message"]
    completed = http.post(
        "/api/v1/tracesets/upload-url/complete", json={"uploadId": "a\u0000b", "files": []}
    )
    assert "not found" in assert_error(completed, 404, "NOT_FOUND")["message"]
    facts = http.get("/api/v1/tracesets", params={"inspected.gpu_model": "a\u0000b"})
    assert facts.status_code == 200, facts.text
    assert facts.json()["items"] == []


@pytest.mark.parametrize(
    ("member", "value"),
    [("name", "a\u0000b"), ("description", "a\u0000b"), ("tags", ["ok", "a\u0000b"])],
)
def test_a_stored_text_holding_a_nul_character_is_refused_with_nothing_stored(
    http: TestClient, services: Services, member: str, value: Any
) -> None:
    before = record_counts(services)
    response = request_upload(http, SUPPORTING, **{member: value})
    message = assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert message == f"{member} contains a NUL character (U+0000), which is not allowed"
    assert record_counts(services) == before
    if member == "name":  # promotion does not rename
        return
    done = upload(http, SUPPORTING, name="kept", description="as given", tags=["t"])
    promoted = http.post(
        f"/api/v1/tracesets/{done['id']}/promote", json={"target": "tenant", member: value}
    )
    message = assert_error(promoted, 400, "VALIDATION_ERROR")["message"]
    assert message == f"{member} contains a NUL character (U+0000), which is not allowed"
    again = http.get(f"/api/v1/tracesets/{done['id']}").json()
    assert (again["scope"], again["description"], again["tags"]) == ("workspace", "as given", ["t"])


@pytest.mark.parametrize("route", ["/api/v1/tracesets", "/api/v1/libraries"])
def test_a_search_holding_a_nul_character_is_a_validation_error(
    http: TestClient, route: str
) -> None:
    response = http.get(route, params={"search": "a\u0000b"})
    message = assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert message == "search contains a NUL character (U+0000), which no name can hold"


def test_a_workload_filter_holding_a_nul_character_finds_the_metadata_holding_it(
    http: TestClient,
) -> None:
    """The queryable copy holds U+FFFD where the metadata held U+0000 (PostgreSQL's jsonb
    refused the filter's \\u0000: a 500); the filter is compared the same way."""
    done = upload(http, SUPPORTING, {"shape": {"rankCount": 1}, "label": "a\u0000b"})
    upload(http, SUPPORTING, {"shape": {"rankCount": 1}, "label": "ab"})
    for text in ("a\u0000b", '"a\\u0000b"'):
        listed = http.get("/api/v1/tracesets", params={"label": text})
        assert listed.status_code == 200, listed.text
        assert [t["id"] for t in listed.json()["items"]] == [done["id"]]


# JSON's escape of a lone surrogate: valid JSON text, but no Unicode text (issue 41).
LONE = "\\ud800"
_FILE = '{"name":"a.bin","size":1,"role":"supporting"}'
_PART = '{"partNumber":1,"etag":"e"}'
SURROGATE_BODIES = [
    (UPLOAD_URL, f'{{"name":"a{LONE}","files":[{_FILE}]}}', "name"),
    (UPLOAD_URL, f'{{"name":"a","description":"{LONE}","files":[{_FILE}]}}', "description"),
    (UPLOAD_URL, f'{{"name":"a","tags":["ok","{LONE}"],"files":[{_FILE}]}}', "tags[1]"),
    (UPLOAD_URL, f'{{"name":"a","workspaceId":"{LONE}","files":[{_FILE}]}}', "workspaceId"),
    (
        UPLOAD_URL,
        f'{{"name":"a","files":[{{"name":"a{LONE}","size":1,"role":"supporting"}}]}}',
        "files[0].name",
    ),
    (
        UPLOAD_URL,
        f'{{"name":"a","files":[{{"name":"a","size":1,"role":"{LONE}"}}]}}',
        "files[0].role",
    ),
    (
        UPLOAD_URL,
        f'{{"name":"a","files":[{{"name":"a","size":1,"role":"supporting","contentType":"{LONE}"}}]}}',
        "files[0].contentType",
    ),
    (COMPLETE_URL, f'{{"uploadId":"{LONE}","files":[]}}', "uploadId"),
    (
        COMPLETE_URL,
        f'{{"uploadId":"u","files":[{{"name":"{LONE}","parts":[{_PART}]}}]}}',
        "files[0].name",
    ),
    (
        COMPLETE_URL,
        f'{{"uploadId":"u","files":[{{"name":"a","parts":[{{"partNumber":1,"etag":"{LONE}"}}]}}]}}',
        "files[0].parts[0].etag",
    ),
    ("promote", f'{{"target":"{LONE}"}}', "target"),
    ("promote", f'{{"description":"x{LONE}"}}', "description"),
    ("promote", f'{{"tags":["{LONE}"]}}', "tags[0]"),
]


@pytest.mark.parametrize(("route", "body", "member"), SURROGATE_BODIES)
def test_a_lone_surrogate_in_a_string_member_is_a_validation_error_naming_it(
    both: tuple[TestClient, TestClient],
    services: Services,
    admin_token: str,
    route: str,
    body: str,
    member: str,
) -> None:
    """A 500 before (the database's driver or the error's encoder could not write it), with
    two tracebacks; through the lanes and through FastAPI's routing alike."""
    for http in both:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        url = route
        if route == "promote":
            url = f"/api/v1/tracesets/{upload(http, SUPPORTING)['id']}/promote"
        before = record_counts(services)
        message = assert_error(raw_post(http, url, body), 400, "VALIDATION_ERROR")["message"]
        assert message.startswith(f"{member} holds a lone surrogate (U+D800)"), message
        assert record_counts(services) == before


def test_a_workload_filter_of_a_lone_surrogate_is_a_validation_error(http: TestClient) -> None:
    response = http.get("/api/v1/tracesets", params={"label": f'"{LONE}"'})
    message = assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert message.startswith("Workload filter 'label' holds a lone surrogate (U+D800)")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (f'{{"note":"{LONE}"}}', "workloadMetadata.note holds a lone surrogate (U+D800)"),
        (f'{{"a":[1,{{"{LONE}":1}}]}}', "workloadMetadata.a[1] has a member name holding a lone"),
        (f'{{"ok":"\\ud83d\\ude00","b":{{"c":"x{LONE}"}}}}', "workloadMetadata.b.c holds a"),
    ],
)
def test_metadata_holding_a_lone_surrogate_is_refused_naming_the_member(
    http: TestClient, where: str, message: str
) -> None:
    """Stored exactly, it could not be read back as UTF-8 text: refused, at upload (400) and
    at promotion (422), naming the member (it said \"'utf-8' codec can't encode character
    '\\ud800' in position 12\")."""
    body = f'{{"name":"a","files":[{_FILE}],"workloadMetadata":{where}}}'
    error = assert_error(raw_post(http, UPLOAD_URL, body), 400, "VALIDATION_ERROR")
    assert error["message"].startswith(message), error
    done = upload(http, SUPPORTING)
    promote = f"/api/v1/tracesets/{done['id']}/promote"
    refused = raw_post(http, promote, f'{{"workloadMetadata":{where}}}')
    assert assert_error(refused, 422, "UNPROCESSABLE_ENTITY")["message"].startswith(message)


def test_an_error_quoting_a_lone_surrogate_is_answered_escaped(
    services: Services, admin_token: str
) -> None:
    """Whatever message quotes a value the client sent, the envelope can be written."""
    from tracestore.server.serving.request_context import error_response

    answer = error_response("req_0", 404, "NOT_FOUND", "Upload session 'a\ud800' not found")
    assert b"Upload session 'a\\\\ud800' not found" in answer.body


def test_a_local_file_name_of_bytes_that_are_not_utf8_is_refused_by_the_client(
    tmp_path: Path,
) -> None:
    name = os.fsdecode(b"rank\xff.json")  # what the file system gives: a lone surrogate
    problem = schemas.file_name_problem(name)
    assert problem == "is not Unicode text: it holds a lone surrogate (U+DCFF)"


@pytest.mark.parametrize(
    "value", [b"bytes=abc", b"items=0-1", b"bytes=", b"bytes=5-2", b"bytes=\xed\xa0\x80", b"x"]
)
def test_a_range_that_is_not_one_is_ignored(http: TestClient, value: bytes) -> None:
    """RFC 9110: a Range the server cannot use is ignored (the whole blob), not answered
    with a plain-text 400 outside the envelope."""
    done = upload(http, SUPPORTING)
    url = http.get(f"/api/v1/tracesets/{done['id']}/download", params={"file": "a.bin"})
    response = http.get(url.json()["url"], headers={"Range": value})
    assert response.status_code == 200
    assert response.content == SUPPORTING["a.bin"][0]


CRAFTED: dict[str, Callable[[], bytes]] = {
    "bomb.zip": lambda: crafted.zip_bomb("bzip2", 64 * MIB),
    "lzma.zip": lambda: crafted.zip_bomb("lzma", 16 * MIB),
    "rank0.json.zst": lambda: crafted.stream_bomb("zstd", 64 * MIB),
    "rank0.json.xz": lambda: crafted.stream_bomb("xz", 16 * MIB),
    "bomb.tar.bz2": lambda: crafted.tar_bomb("bzip2", 64 * MIB),
    "many.tar.gz": lambda: crafted.many_members_tar_gz(20_000, empty=True),
    "many.zip": lambda: crafted.many_members_zip(12_000),
    "pax.tar.gz": lambda: crafted.pax_bomb(8 * MIB),
    "far.json": crafted.nonfinite_kineto,
    "huge.json": crafted.huge_rank_kineto,
    "et.json": crafted.huge_pid_et,
}


def _leaves(found: dict[str, Any]) -> list[dict[str, Any]]:
    members = found.get("members") or []
    return [leaf for member in members for leaf in _leaves(member)] if members else [found]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_trace_is_stored_ready_and_answered_as_json(http: TestClient, name: str) -> None:
    """Issue 41's hostile traces: each is stored, its inspection recorded with the reason
    it stopped (a budget, a cap, a number out of range), and every answer is JSON."""

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in the answer")

    traceset = upload(http, {name: (CRAFTED[name](), "primary")}, {"shape": {"rankCount": 1}})
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}")
    got = json.loads(answer.text, parse_constant=refuse)
    assert (got["status"], got["inspection"]["status"]) == ("ready", "complete")
    (found,) = got["inspection"]["files"]
    reasons = [found["reason"], *(leaf["reason"] for leaf in _leaves(found))]
    assert any(reasons), found
