"""A team on one service, through real processes: a `tracestore serve` reached over the
network, colleagues with their own access, a CLI that finds its service."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.test_e2e_serve import make_traces, serving, tracestore, write_meta
from tests.uploading import UPLOAD_URL

pytestmark = pytest.mark.slow  # a server process and several CLI processes per test


def _upload_body() -> dict[str, object]:
    return {"name": "probe", "files": [{"name": "a.txt", "size": 3, "role": "supporting"}]}


def test_a_wildcard_bind_hands_out_urls_the_client_can_reach(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--host", "0.0.0.0") as served:
        port = served.url.rsplit(":", 1)[1]
        auth = {"Authorization": f"Bearer {served.token}"}
        answer = httpx.post(served.url + UPLOAD_URL, json=_upload_body(), headers=auth)
        assert answer.status_code == 200, answer.text
        part_url = answer.json()["files"][0]["parts"][0]["url"]
        assert part_url.startswith(f"http://127.0.0.1:{port}/blobs/parts/")
        # A client that dialled the wildcard itself is handed the address it reached.
        wild = httpx.post(
            served.url + UPLOAD_URL,
            json=_upload_body(),
            headers={**auth, "Host": f"0.0.0.0:{port}"},
        )
        assert "0.0.0.0" not in wild.text
        assert wild.json()["files"][0]["parts"][0]["url"].startswith(f"http://127.0.0.1:{port}/")

        files = make_traces(tmp_path / "traces", [6 * 1024 * 1024, 100])
        meta = write_meta(tmp_path / "meta.json", 2)
        uploaded = tracestore(
            served, "upload", str(tmp_path / "traces"), "--workload-metadata", str(meta), "--json"
        )
        assert uploaded.returncode == 0, uploaded.stderr
        view = json.loads(uploaded.stdout)
        assert view["status"] == "ready"
        downloaded = tracestore(served, "download", view["id"], "-o", str(tmp_path / "out"))
        assert downloaded.returncode == 0, downloaded.stderr
        for name, data in files.items():
            assert (tmp_path / "out" / name).read_bytes() == data
    log = (tmp_path / "server.log").read_text()
    assert "Presigned URLs follow each request's scheme and Host" in log
