"""Hostile traces through a real `tracestore serve` (issue 41): a bzip2 ZIP bomb and a zstd
bomb are inspected within the completion without the process growing, an archive of many
members stores a bounded inspection that the GET, /libraries and `tracestore show` answer,
and the test bounds its own time (a hung completion fails it, not the run) and the server's
memory (its RSS polled from /proc)."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import crafted
from tests.support.served import Served, serving, tracestore
from tracestore.client import Client

pytestmark = pytest.mark.slow
MIB = crafted.MIB


def rss_mib(pid: int) -> float:
    """The process's resident set now."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) / 1024  # type: ignore[index]


class RssWatch:
    """The largest RSS of ``pid`` while the block runs, polled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> RssWatch:
        self.peak = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _upload(served: Served, directory: Path, metadata: dict[str, Any], limit: float) -> str:
    """Upload ``directory`` in a thread, waiting at most ``limit`` seconds for its answer."""

    def run() -> str:
        with Client(served.url, served.token) as client:
            return client.upload_traceset(directory, workload_metadata=metadata).id

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=limit)


def _strict_get(served: Served, traceset_id: str) -> dict[str, Any]:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the GET's answer")

    with served.api() as api:
        answer = api.get(f"/api/v1/tracesets/{traceset_id}")
    assert answer.status_code == 200, answer.text
    return dict(json.loads(answer.text, parse_constant=refuse))


def test_bombs_are_inspected_within_the_completion_in_bounded_memory(tmp_path: Path) -> None:
    """The issue's 1,791-byte ZIP (a bzip2 member of 2 GiB of spaces) took the process past
    4 GiB; its 1 MB zstd file of Kineto JSON held completion 99 s. Here 512 MiB each."""
    source = tmp_path / "traces"
    source.mkdir()
    (source / "bomb.zip").write_bytes(crafted.zip_bomb("bzip2", 512 * MIB))
    (source / "rank0.json.zst").write_bytes(crafted.stream_bomb("zstd", 512 * MIB))
    with serving(tmp_path / "data") as served:
        with RssWatch(served.pid) as watch:
            start = watch.peak
            traceset_id = _upload(served, source, {"shape": {"rankCount": 2}}, limit=120)
        assert watch.peak - start < 150, f"the server grew {watch.peak - start:.0f} MiB"
        got = _strict_get(served, traceset_id)
    files = {f["name"]: f for f in got["inspection"]["files"]}
    (member,) = files["bomb.zip"]["members"]
    assert member["reason"].startswith("inspection stopped after"), member["reason"]
    assert (member["rank"], files["rank0.json.zst"]["rank"]) == (0, 0)  # what was read
    assert files["rank0.json.zst"]["reason"].startswith("inspection stopped after")


def test_an_archive_of_many_members_is_answered_bounded_everywhere(tmp_path: Path) -> None:
    """The issue's .tar.gz of 300,000 rank-0 members stored a 227 MB inspection; every GET
    then took 4.9 s, /libraries 3-8 s, `tracestore show` 1.2 GB."""
    source = tmp_path / "traces"
    source.mkdir()
    (source / "many.tar.gz").write_bytes(crafted.many_members_tar_gz(20_000))
    env = {
        "TRACESTORE_INSPECT_MAX_MEMBERS": "2000",
        "TRACESTORE_INSPECT_MAX_EXPANSION": "10000",
        "TRACESTORE_MAX_INSPECTION_SIZE": "256KiB",
    }
    with serving(tmp_path / "data", env=env) as served:
        with RssWatch(served.pid) as watch:
            start = watch.peak
            traceset_id = _upload(served, source, {"shape": {"rankCount": 1}}, limit=120)
        assert watch.peak - start < 100, f"the server grew {watch.peak - start:.0f} MiB"
        got = _strict_get(served, traceset_id)
        assert len(json.dumps(got["inspection"])) <= 256 * 1024
        assert got["inspection"]["truncated"]["limit"] == 256 * 1024
        (archive,) = got["files"]
        assert archive["metadataStatus"] == "failed"
        with served.api() as api:
            assert api.get("/api/v1/libraries").status_code == 200
        shown = tracestore(served, "show", traceset_id)
        assert shown.returncode == 0, shown.stderr
        assert "many.tar.gz" in shown.stdout
    (told,) = got["inspection"]["files"]
    assert told["reason"].startswith("inspected the first 2,000 members; 18,000 more were")
