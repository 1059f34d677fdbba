"""The client hashes each file while it sends it and declares the SHA-256 at completion: the
real Client against the real app in-process, its requests seen through a transport wrapper."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.uploading import one_part_session
from tracestore import errors, schemas
from tracestore.client import Client, RetryPolicy, uploader
from tracestore.filedigest import FileDigest
from tracestore.readahead import ReadAhead
from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.settings import MIB

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
META = {"shape": {"rankCount": 2}}
Hook = Callable[[str, int], None]


class Recorder(httpx.BaseTransport):
    """Passes every request to the app; keeps the JSON bodies of API calls and the part
    PUTs (as file name and part number), and runs ``before``/``after`` hooks around PUTs."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.bodies: dict[str, list[Any]] = {}
        self.puts: list[tuple[str, int]] = []  # in the order they were stored
        self.started: list[tuple[str, int]] = []  # in the order they were sent
        self.parts: dict[str, tuple[str, int]] = {}  # part URL -> (file name, part number)
        self.before: Hook = lambda name, number: None
        self.after: Hook = lambda name, number: None

    def learn(self, session: schemas.UploadUrlResponse) -> None:
        for entry in session.files:
            for part in entry.parts:
                self.parts[str(httpx.URL(part.url))] = (entry.name, part.part_number)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        part = self.parts.get(str(request.url)) if request.method == "PUT" else None
        if part is None:
            if request.method == "POST":
                with self.lock:
                    self.bodies.setdefault(request.url.path, []).append(json.loads(request.read()))
            return self.inner.handle_request(request)
        with self.lock:
            self.started.append(part)
        self.before(*part)
        response = self.inner.handle_request(request)
        if response.status_code == 200:
            with self.lock:
                self.puts.append(part)
        self.after(*part)
        return response

    def completion(self) -> dict[str, str | None]:
        """The sha256 of each file in the last completion request."""
        (*_, body) = self.bodies["/api/v1/tracesets/upload-url/complete"]
        return {f["name"]: f.get("sha256") for f in body["files"]}


@pytest.fixture
def app_http(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services), raise_server_exceptions=False) as http:
        yield http


@pytest.fixture
def recorder(app_http: TestClient) -> Recorder:
    return Recorder(app_http._transport)


@pytest.fixture
def client(recorder: Recorder, admin_token: str) -> Client:
    http = httpx.Client(transport=recorder, base_url="http://testserver")
    return Client("http://testserver", admin_token, http=http, retry=FAST)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def upload(client: Client, recorder: Recorder, path: Path, **options: Any) -> schemas.Traceset:
    return client.upload_traceset(
        path, workload_metadata=META, on_started=recorder.learn, **options
    )


def declared_and_stored(
    recorder: Recorder, traceset: schemas.Traceset, tree: dict[str, bytes]
) -> None:
    """The completion declared each file's SHA-256, and the traceset holds each file by it."""
    assert recorder.completion() == {name: sha256(data) for name, data in tree.items()}
    assert {f.name: f.hash for f in traceset.files} == {
        name: f"sha256:{sha256(data)}" for name, data in tree.items()
    }


def overwrite(path: Path, offset: int, data: bytes) -> None:
    """Change bytes in place: the file keeps its size."""
    with open(path, "r+b") as target:
        target.seek(offset)
        target.write(data)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, bytes]:
    """Two files of three 5 MiB parts and one of a single part."""
    return {
        "rank_0.bin": os.urandom(12 * MIB + 5),
        "rank_1.bin": os.urandom(10 * MIB + 1),
        "z.bin": os.urandom(1000),
    }


def test_the_completion_declares_each_files_sha256_and_the_start_does_not(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    traceset = upload(client, recorder, write_tree(tmp_path / "t", tree), concurrency=1)

    assert traceset.status == "ready"
    assert recorder.completion() == {name: sha256(data) for name, data in tree.items()}
    (start,) = recorder.bodies["/api/v1/tracesets/upload-url"]
    assert all("sha256" not in f for f in start["files"])
    # Part-major: every file's first part goes before any file's second.
    assert recorder.started == [
        ("rank_0.bin", 1),
        ("rank_1.bin", 1),
        ("z.bin", 1),
        ("rank_0.bin", 2),
        ("rank_1.bin", 2),
        ("rank_0.bin", 3),
        ("rank_1.bin", 3),
    ]


def hold_first_part_until_the_rest_answered(recorder: Recorder, name: str, later: int) -> None:
    """Part 1 of ``name`` goes out only after its ``later`` other parts were stored, so
    they finish out of turn and the file's hash must read them back."""
    answered = threading.Semaphore(0)

    def before(file: str, number: int) -> None:
        if (file, number) == (name, 1):
            for _ in range(later):
                assert answered.acquire(timeout=30)

    def after(file: str, number: int) -> None:
        if file == name and number > 1:
            answered.release()

    recorder.before, recorder.after = before, after


def test_parts_finishing_out_of_order_in_parallel_still_give_the_right_hash(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    hold_first_part_until_the_rest_answered(recorder, "rank_0.bin", later=2)
    traceset = upload(client, recorder, write_tree(tmp_path / "t", tree), concurrency=8)

    assert recorder.puts.index(("rank_0.bin", 1)) > recorder.puts.index(("rank_0.bin", 3))
    declared_and_stored(recorder, traceset, tree)


def test_a_broken_hash_chain_falls_back_to_hashing_the_file(
    client: Client,
    recorder: Recorder,
    tmp_path: Path,
    tree: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_backs: list[tuple[int, int]] = []

    def failing_disk(path: Path, stop: threading.Event) -> Callable[[int, int], Iterator[bytes]]:
        def read(offset: int, length: int) -> Iterator[bytes]:
            if length:
                read_backs.append((offset, length))
                raise OSError("disk gone (injected)")
            return iter(())

        return read

    # The disk fails only for reading a part back, the rare path that breaks the chain.
    monkeypatch.setattr(uploader, "read_back", failing_disk)
    hold_first_part_until_the_rest_answered(recorder, "rank_0.bin", later=2)
    traceset = upload(client, recorder, write_tree(tmp_path / "t", tree), concurrency=8)

    assert read_backs and read_backs[0][0] >= 5 * MIB
    assert traceset.status == "ready"
    assert recorder.completion()["rank_0.bin"] == sha256(tree["rank_0.bin"])


def test_a_resume_hashes_the_parts_the_service_holds_without_sending_them(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)
    session = client.start_upload(
        schemas.TracesetUploadUrlRequest(
            name="resumed",
            files=[
                schemas.UploadFileSpec(name=n, size=len(d), role="primary") for n, d in tree.items()
            ],
            workload_metadata=META,
        )
    )
    urls = {(f.name, p.part_number): p.url for f in session.files for p in f.parts}
    for name, number in [("rank_0.bin", 2), ("rank_1.bin", 1), ("rank_1.bin", 3)]:
        data = tree[name][(number - 1) * 5 * MIB : number * 5 * MIB]
        assert client.http.put(urls[(name, number)], content=data).status_code == 200
    recorder.puts.clear()

    traceset = client.upload_traceset(
        root,
        resume_upload_id=session.upload_id,
        on_started=recorder.learn,
        concurrency=4,
    )

    assert sorted(recorder.puts) == [
        ("rank_0.bin", 1),
        ("rank_0.bin", 3),
        ("rank_1.bin", 2),
        ("z.bin", 1),
    ]
    assert recorder.completion() == {name: sha256(data) for name, data in tree.items()}
    out = tmp_path / "out"
    client.download_traceset(traceset.id, out)
    for name, data in tree.items():
        assert (out / name).read_bytes() == data


def test_a_file_changed_during_its_upload_is_refused_not_stored_mixed(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)

    def change(name: str, number: int) -> None:
        if (name, number) == ("rank_0.bin", 2):
            # Part 1 went with the old bytes and part 3 will go with the new ones: each is
            # hashed as it passes, so only the file's modification time tells.
            overwrite(root / "rank_0.bin", 0, b"\x00" * 64)
            overwrite(root / "rank_0.bin", 11 * MIB, b"\x00" * 64)

    recorder.before = change
    with pytest.raises(errors.UploadIncomplete) as failed:
        upload(client, recorder, root, concurrency=1)

    assert isinstance(failed.value.cause, errors.ValidationError)
    assert "SHA-256 of file 'rank_0.bin'" in failed.value.message
    assert "rank_0.bin changed during the upload" in failed.value.message
    assert client.get_traceset(failed.value.traceset_id).status == "uploading"
    now = (root / "rank_0.bin").read_bytes()
    assert recorder.completion()["rank_0.bin"] == sha256(now)


def test_a_file_changed_before_any_of_its_bytes_went_is_stored_as_it_is_now(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)

    def change(name: str, number: int) -> None:
        if (name, number) == ("rank_0.bin", 1):
            overwrite(root / "z.bin", 0, b"new!")

    recorder.before = change
    traceset = upload(client, recorder, root, concurrency=1)

    now = (root / "z.bin").read_bytes()
    assert now != tree["z.bin"] and len(now) == len(tree["z.bin"])
    assert {f.name: f.hash for f in traceset.files}["z.bin"] == f"sha256:{sha256(now)}"


def test_a_file_that_grows_during_its_upload_is_an_integrity_error(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)

    def grow(name: str, number: int) -> None:
        if (name, number) == ("rank_0.bin", 2):
            with open(root / "z.bin", "ab") as target:
                target.write(b"more")

    recorder.before = grow
    with pytest.raises(errors.UploadIncomplete) as failed:
        upload(client, recorder, root, concurrency=1)
    assert isinstance(failed.value.cause, errors.IntegrityError)
    assert "z.bin changed size while it was being uploaded" in failed.value.message


def test_complete_upload_sends_a_declared_sha256_for_the_service_to_verify(
    client: Client, recorder: Recorder
) -> None:
    data = os.urandom(3000)
    upload_id, etag = one_part_session(client, data)
    with pytest.raises(errors.ValidationError, match=r"SHA-256 of file 'a\.bin'"):
        client.complete_upload(upload_id, {"a.bin": {1: etag}}, {"a.bin": "0" * 64})
    done = client.complete_upload(upload_id, {"a.bin": {1: etag}}, {"a.bin": sha256(data)})
    assert done.files[0].hash == f"sha256:{sha256(data)}"


def count_turns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The part numbers whose transfers in the client (not the service, in-process here)
    hashed their bytes as they passed."""
    turns: list[int] = []

    class ClientDigest(FileDigest):
        def _claim(self, owner: object, number: int) -> Any:
            turns.append(number)
            return super()._claim(owner, number)

    monkeypatch.setattr(uploader, "FileDigest", ClientDigest)
    return turns


def read_ahead_of(*paths: Path, chunk: int = MIB) -> ReadAhead:
    with ReadAhead(paths, chunk=chunk) as ahead:
        ahead._thread.join(timeout=30)  # all of it read before the upload stops it
    return ahead


def test_parts_read_ahead_are_not_hashed_again_and_the_completion_declares_the_files(
    client: Client,
    recorder: Recorder,
    tmp_path: Path,
    tree: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = write_tree(tmp_path / "t", tree)
    turns = count_turns(monkeypatch)
    traceset = upload(client, recorder, root, concurrency=4, read_ahead=read_ahead_of(root))

    assert turns == []
    assert len(recorder.puts) == 7
    declared_and_stored(recorder, traceset, tree)


def test_a_read_ahead_that_stopped_early_leaves_the_rest_to_be_hashed_as_it_goes(
    client: Client,
    recorder: Recorder,
    tmp_path: Path,
    tree: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = write_tree(tmp_path / "t", tree)
    # Only rank_0.bin, and of it only its first 7.5 MiB: part 1 (5 MiB) whole, part 2 begun.
    chunk = 5 * MIB // 2
    ahead = ReadAhead([root / "rank_0.bin"], chunk=chunk)
    checks = iter([False, False, False, True])
    ahead._stopped.is_set = lambda: next(checks)  # type: ignore[method-assign]
    ahead._hash(root / "rank_0.bin", memoryview(bytearray(chunk)))
    turns = count_turns(monkeypatch)

    upload(client, recorder, root, concurrency=1, read_ahead=ahead)

    assert sorted(turns) == [1, 1, 2, 2, 3, 3]  # every part but rank_0.bin's first
    assert recorder.completion() == {name: sha256(data) for name, data in tree.items()}


def test_a_file_rewritten_after_it_was_read_ahead_is_stored_as_it_is_now(
    client: Client, recorder: Recorder, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)
    ahead = read_ahead_of(root)
    overwrite(root / "rank_1.bin", 6 * MIB, b"rewritten")  # same size, new bytes
    stat = (root / "rank_1.bin").stat()
    os.utime(root / "rank_1.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

    traceset = upload(client, recorder, root, concurrency=4, read_ahead=ahead)

    now = (root / "rank_1.bin").read_bytes()
    assert now != tree["rank_1.bin"]
    assert recorder.completion()["rank_1.bin"] == sha256(now)
    assert {f.name: f.hash for f in traceset.files}["rank_1.bin"] == f"sha256:{sha256(now)}"


def test_an_upload_that_fails_before_its_parts_stops_its_read_ahead(
    client: Client, tmp_path: Path, tree: dict[str, bytes]
) -> None:
    root = write_tree(tmp_path / "t", tree)
    ahead = ReadAhead([root], chunk=MIB)
    # Not started: only whether the upload stopped it is seen.
    with pytest.raises(errors.ValidationError, match="rankCount"):
        client.upload_traceset(root, workload_metadata={"shape": {}}, read_ahead=ahead)
    assert ahead._stopped.is_set()
