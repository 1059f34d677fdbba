"""The embedded store hashes parts as they arrive, so completion need not read files again;
whenever that running digest cannot vouch for the parts chosen, completion hashes the bytes."""

from __future__ import annotations

import hashlib
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.uploading import UPLOAD_URL, complete, request_upload
from tracestore.server.services import Services
from tracestore.server.settings import MIB
from tracestore.server.storage import local
from tracestore.server.storage.blobs import StagedFile
from tracestore.server.storage.local import LocalBlobStore


@pytest.fixture
def full_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the files completion hashes by reading them."""
    calls: list[int] = []
    original = local._hash_stream

    def counting(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        original(*args, **kwargs)

    monkeypatch.setattr(local, "_hash_stream", counting)
    return calls


def _start(http: TestClient, data: bytes) -> dict[str, Any]:
    response = request_upload(http, {"r.et": (data, "primary")}, {"shape": {"rankCount": 1}})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _put(http: TestClient, answer: dict[str, Any], data: bytes, number: int) -> str:
    part = next(p for p in answer["files"][0]["parts"] if p["partNumber"] == number)
    offset = (number - 1) * answer["partSize"]
    response = http.put(part["url"], content=data[offset : offset + part["size"]])
    assert response.status_code == 200, response.text
    return str(response.headers["etag"])


def _complete(http: TestClient, answer: dict[str, Any], etags: dict[int, str]) -> str:
    parts = [{"partNumber": n, "etag": e} for n, e in sorted(etags.items())]
    done = complete(http, answer["uploadId"], {"r.et": parts})
    assert done.status_code == 201, done.text
    return str(done.json()["files"][0]["hash"])


@pytest.mark.parametrize("order", ["in order", "reversed", "shuffled"])
def test_parts_in_any_order_complete_without_reading_the_file_again(
    http: TestClient, full_hashes: list[int], order: str
) -> None:
    data = random.Random(order).randbytes(17 * MIB + 3)  # four 5 MiB parts
    answer = _start(http, data)
    numbers = [p["partNumber"] for p in answer["files"][0]["parts"]]
    if order == "reversed":
        numbers.reverse()
    elif order == "shuffled":
        random.Random(3).shuffle(numbers)
    etags = {n: _put(http, answer, data, n) for n in numbers}
    assert _complete(http, answer, etags) == "sha256:" + hashlib.sha256(data).hexdigest()
    assert full_hashes == []


def test_parts_sent_in_parallel_complete_with_the_right_digest(
    http: TestClient, full_hashes: list[int]
) -> None:
    data = random.Random(5).randbytes(31 * MIB)  # seven parts
    answer = _start(http, data)
    numbers = list(range(1, 8))
    random.Random(6).shuffle(numbers)
    with ThreadPoolExecutor(4) as pool:
        sent = pool.map(lambda n: _put(http, answer, data, n), numbers)
        etags = dict(zip(numbers, sent, strict=True))
    assert _complete(http, answer, etags) == "sha256:" + hashlib.sha256(data).hexdigest()
    assert full_hashes == []


def test_a_part_sent_again_with_other_bytes_is_hashed_from_what_completion_names(
    http: TestClient, full_hashes: list[int]
) -> None:
    data = random.Random(7).randbytes(11 * MIB)
    answer = _start(http, data)
    etags = {n: _put(http, answer, data, n) for n in (1, 2, 3)}
    changed = data[: 5 * MIB] + bytes(5 * MIB) + data[10 * MIB :]
    etags[2] = _put(http, answer, changed, 2)  # kept apart from the first send's bytes
    assert _complete(http, answer, etags) == "sha256:" + hashlib.sha256(changed).hexdigest()
    assert full_hashes == [1]


def test_after_a_restart_completion_hashes_the_staged_bytes(
    http: TestClient, services: Services, full_hashes: list[int]
) -> None:
    data = random.Random(8).randbytes(6 * MIB)
    answer = _start(http, data)
    first = _put(http, answer, data, 1)
    store = services.store
    assert isinstance(store, LocalBlobStore)
    # A new process: the same directories, none of the first one's memory.
    services.store = LocalBlobStore(store.root, store.signer)
    second = _put(http, answer, data, 2)
    assert _complete(http, answer, {1: first, 2: second}) == (
        "sha256:" + hashlib.sha256(data).hexdigest()
    )
    assert full_hashes == [1]


def test_a_part_written_in_place_adds_names_not_inodes(
    http: TestClient, services: Services
) -> None:
    # An inode costs the kernel as much as writing a MiB on some file systems (a VM's ext4
    # without a journal here, where each one removed makes the next dearer for minutes):
    # a file's part written in place makes its ``data`` and names, hard links to it, in
    # its upload's directory; no directory per part, nor per file.
    data = random.Random(9).randbytes(6 * MIB)
    answer = _start(http, data)
    etag = _put(http, answer, data, 1).strip('"')
    store = services.store
    assert isinstance(store, LocalBlobStore)
    upload_dir = store.root / "staging" / answer["uploadId"]
    inode = (upload_dir / "0.data").stat().st_ino
    assert sorted(p.name for p in upload_dir.iterdir()) == sorted(
        ["0.data", "0.00001.claim", f"0.00001.{etag}"]
    )
    assert {p.stat().st_ino for p in upload_dir.iterdir()} == {inode}


@pytest.mark.slow
def test_the_files_of_one_upload_keep_to_their_own_names(http: TestClient) -> None:
    # Positions 1 and 10 share a first digit: neither file sees the other's parts.
    files = {f"r{i}.et": (bytes([i]) * (MIB + i), "primary") for i in range(12)}
    response = request_upload(http, files, {"shape": {"rankCount": 12}})
    assert response.status_code == 200, response.text
    answer = response.json()
    etags: dict[str, list[dict[str, Any]]] = {}
    for file in answer["files"]:
        (part,) = file["parts"]
        sent = http.put(part["url"], content=files[file["name"]][0])
        assert sent.status_code == 200, sent.text
        etags[file["name"]] = [{"partNumber": 1, "etag": sent.headers["etag"]}]
    resumed = http.get(f"{UPLOAD_URL}/{answer['uploadId']}")
    assert resumed.status_code == 200, resumed.text
    assert {f["name"]: f["receivedParts"][0]["etag"] for f in resumed.json()["files"]} == {
        name: parts[0]["etag"].strip('"') for name, parts in etags.items()
    }
    done = complete(http, answer["uploadId"], etags)
    assert done.status_code == 201, done.text
    assert {f["name"]: f["hash"] for f in done.json()["files"]} == {
        name: "sha256:" + hashlib.sha256(data).hexdigest() for name, (data, _) in files.items()
    }


@pytest.mark.parametrize("layout", ["a directory per file", "and a directory per part"])
def test_staging_of_the_layouts_before_is_read_as_it_is(
    http: TestClient, services: Services, layout: str
) -> None:
    # An upload under way when the service was upgraded: its file was staged in a
    # directory of its own (``0/data``, ``0/NNNNN.claim``, ``0/NNNNN.<etag>``), and, before
    # that, each part's names in a directory per part (``0/NNNNN/claim``,
    # ``0/NNNNN/<etag>``). Its parts still count, a part not yet sent goes into that file, a
    # re-send still goes to a file of its own, and completion takes what it names.
    data = random.Random(10).randbytes(16 * MIB)  # four parts
    answer = _start(http, data)
    etags = {n: _put(http, answer, data, n) for n in (1, 2, 3)}
    store = services.store
    assert isinstance(store, LocalBlobStore)
    upload_dir = store.root / "staging" / answer["uploadId"]
    staged = upload_dir / "0"
    staged.mkdir()
    (upload_dir / "0.data").rename(staged / "data")
    for number, etag in etags.items():
        key, etag = f"{number:05d}", etag.strip('"')
        if layout == "a directory per file":
            (upload_dir / f"0.{key}.claim").rename(staged / f"{key}.claim")
            (upload_dir / f"0.{key}.{etag}").rename(staged / f"{key}.{etag}")
        else:
            (staged / key).mkdir()
            (upload_dir / f"0.{key}.claim").rename(staged / key / "claim")
            (upload_dir / f"0.{key}.{etag}").rename(staged / key / etag)
    assert sorted(p.name for p in upload_dir.iterdir()) == ["0"]
    # A new process: no running digest, so completion hashes what the records name.
    services.store = store = LocalBlobStore(store.root, store.signer)
    stage = StagedFile(answer["uploadId"], 0, len(data), answer["partSize"])
    assert {n: p.etag for n, p in store.list_parts([stage])[0].items()} == {
        n: e.strip('"') for n, e in etags.items()
    }
    etags[4] = _put(http, answer, data, 4)
    fourth = etags[4].strip('"')
    assert (staged / f"00004.{fourth}").stat().st_ino == (staged / "data").stat().st_ino
    changed = data[: 5 * MIB] + bytes(5 * MIB) + data[10 * MIB :]
    etags[2] = _put(http, answer, changed, 2)
    # The old claim held: the re-send has a file of its own, the old record is gone.
    assert (staged / "00002" / (etags[2].strip('"') + ".part")).is_file()
    assert not list(staged.glob("00002.*[0-9a-f]")) and not (staged / "00002" / etags[2]).exists()
    assert sorted(p.name for p in upload_dir.iterdir()) == ["0"]  # nothing of the new layout
    assert store.list_parts([stage])[0][2].etag == etags[2].strip('"')
    assert _complete(http, answer, etags) == "sha256:" + hashlib.sha256(changed).hexdigest()
    services.wait_for_background()
    assert not upload_dir.exists()
