"""A team on one service, through real processes: a `tracestore serve` reached over the
network, colleagues with their own access, a CLI that finds its service."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.served import (
    MIB,
    Served,
    make_traces,
    serving,
    start_upload,
    tracestore,
    write_meta,
)
from tests.support.uploading import UPLOAD_URL
from tests.support.waiting import wait_until
from tracestore.client import Client
from tracestore.server.settings import Settings

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


def _as(served: Served, token: str) -> Served:
    return replace(served, token=token, env={**served.env, "TRACESTORE_TOKEN": token})


def test_a_colleague_gets_their_own_access(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data) as served:
        on_data = ["--data-dir", str(data)]
        # Administration on the data directory while the service runs.
        for words in (
            ["workspace", "create", "team"],
            ["user", "create", "ada", "--workspace", "team"],
            ["tenant", "create", "vision"],
            ["user", "create", "bob", "--tenant", "vision"],
        ):
            done = tracestore(served, *words, *on_data)
            assert done.returncode == 0, done.stderr
        tokens = {}
        for name in ("ada", "bob"):
            made = tracestore(served, "token", "create", "--user", name, "--json", *on_data)
            assert made.returncode == 0, made.stderr
            tokens[name] = json.loads(made.stdout)
        ada, bob = _as(served, tokens["ada"]["token"]), _as(served, tokens["bob"]["token"])

        make_traces(tmp_path / "traces", [100, 200])
        meta = write_meta(tmp_path / "meta.json", 2)
        uploaded = tracestore(
            ada, "upload", str(tmp_path / "traces"), "--workload-metadata", str(meta), "--json"
        )
        assert uploaded.returncode == 0, uploaded.stderr
        traceset = json.loads(uploaded.stdout)
        workspaces = json.loads(tracestore(served, "workspace", "list", "--json", *on_data).stdout)
        assert traceset["workspaceId"] == next(w["id"] for w in workspaces if w["name"] == "team")

        seen_by_admin = json.loads(tracestore(served, "ls", "--json").stdout)
        assert [t["id"] for t in seen_by_admin] == [traceset["id"]]
        assert json.loads(tracestore(bob, "ls", "--json").stdout) == []
        hidden = tracestore(bob, "show", traceset["id"])
        assert hidden.returncode == 1 and "not found" in hidden.stderr

        revoked = tracestore(served, "token", "revoke", tokens["ada"]["id"], *on_data)
        assert revoked.returncode == 0, revoked.stderr
        # Another process revoked it: the server believes its cached check for at most
        # TRACESTORE_TOKEN_CACHE_SECONDS (2 s by default), then refuses.
        refused = wait_until(
            lambda: (listed := tracestore(ada, "ls")).returncode != 0 and listed,
            "the revoked token was still believed",
            Settings().token_cache_seconds + 30,  # each try starts a command: slow, loaded
            every=0.25,
        )
        assert refused.returncode == 1
        assert "Invalid or missing authentication token" in refused.stderr


def _plain(served: Served, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A ``tracestore`` command run in ``cwd`` with no TRACESTORE_URL or TRACESTORE_TOKEN."""
    env = {k: v for k, v in served.env.items() if k not in ("TRACESTORE_URL", "TRACESTORE_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_cli_finds_the_service_started_in_its_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = work / "tracestore-data"
    with serving(data, cwd=work) as served:
        assert served.url != "http://127.0.0.1:8000"  # not the default port
        record = json.loads((data / "service.json").read_text())
        assert record["url"] == served.url

        make_traces(work / "traces", [100, 200])
        meta = write_meta(work / "meta.json", 2)
        uploaded = _plain(served, work, "upload", "traces", "--workload-metadata", "meta.json")
        assert uploaded.returncode == 0, uploaded.stderr
        listed = _plain(served, work, "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [t["id"] for t in json.loads(listed.stdout)] == [uploaded.stdout.split()[0]]

        # Told another service, the admin token stays home.
        elsewhere = _plain(served, work, "ls", "--url", "http://127.0.0.1:8000")
        assert elsewhere.returncode == 2
        assert f"only sent to the service that wrote it ({served.url})" in elsewhere.stderr

        # Interrupted, `upload --url ...` prints a resume command that carries the --url:
        # run as printed, from a directory with no service record, it finishes the upload
        # (TRACESTORE_URL names no service: only the --url can find it).
        files = make_traces(work / "big", [30 * MIB, 30 * MIB + 3])
        process, upload_id = start_upload(
            served,
            work / "big",
            meta,
            "--url",
            served.url,
            env={**served.env, "TRACESTORE_URL": "http://127.0.0.1:9"},
        )
        with Client(served.url, served.token) as client:

            def a_part_in() -> bool:
                assert process.poll() is None, "the upload ended before it could be interrupted"
                return any(f.received_parts for f in client.resume_upload(upload_id).files)

            wait_until(a_part_in, "no part arrived", timeout=120, every=0.02)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
        hint = rest.split("Interrupted; resume with: ")[-1].strip()
        assert process.returncode == 130, rest
        words = shlex.split(hint)
        assert words[:4] == ["tracestore", "upload", "--url", served.url]
        resumed = subprocess.run(
            [sys.executable, "-m", "tracestore.cli", *words[1:], "--json"],
            env={**served.env, "TRACESTORE_URL": "http://127.0.0.1:9"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert {f["name"]: f["size"] for f in json.loads(resumed.stdout)["files"]} == {
            name: len(body) for name, body in files.items()
        }
    assert not (data / "service.json").exists()  # a stopped service leaves no record


def test_serve_reads_forgiving_settings_and_refuses_a_bad_one_in_one_line(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tracestore.toml"
    config.write_text('TRACESTORE_SESSION_TTL = "PT1M"\nsweep_intervall = 60\n')
    env = {
        "TRACESTORE_PART_SIZE": "6MiB",
        "TRACESTORE_PURGE_GRACE": "60",
        "TRACESTORE_CONFIG": str(config),
        "TRACESTORE_DOWNLOAD_URL_TLL": "PT5M",
    }
    with serving(tmp_path / "data", env=env) as served:
        answer = httpx.post(
            served.url + UPLOAD_URL,
            json=_upload_body(),
            headers={"Authorization": f"Bearer {served.token}"},
        )
        assert answer.status_code == 200, answer.text
        session = answer.json()
        assert session["partSize"] == 6 * MIB
        expires = datetime.fromisoformat(session["expiresAt"].replace("Z", "+00:00"))
        assert timedelta(seconds=30) < expires - datetime.now(UTC) <= timedelta(minutes=1)
    log = (tmp_path / "server.log").read_text()
    assert (
        "Warning: TRACESTORE_DOWNLOAD_URL_TLL is not a tracestore setting and is ignored; "
        "did you mean TRACESTORE_DOWNLOAD_URL_TTL?"
    ) in log
    assert "key 'sweep_intervall' is not a tracestore setting" in log
    assert "did you mean sweep_interval?" in log

    for name, value in (("TRACESTORE_PART_SIZE", "64XB"), ("TRACESTORE_PURGE_GRACE", "1 hour")):
        refused = subprocess.run(
            [sys.executable, "-m", "tracestore.cli", "serve", "--port", "0"],
            env={**os.environ, name: value, "TRACESTORE_DATA_DIR": str(tmp_path / "other")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.startswith(f"Error: {name}={value}: expected ")


# Every way the docs pages name something to load: attributes, and Swagger UI's spec url.
_REFERENCES = re.compile(r"""(?:\b(?:src|href|spec-url)=|\burl:\s*)["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_everything_from_the_service(tmp_path: Path, page: str) -> None:
    with serving(tmp_path / "data") as served:
        html = httpx.get(served.url + page)
        assert html.status_code == 200
        assert "://" not in html.text  # no other host is named anywhere on the page
        references = _REFERENCES.findall(html.text)
        assert len(references) >= (4 if page == "/docs" else 3), html.text
        for reference in references:
            assert reference.startswith("/"), reference  # this service, not a CDN
            asset = httpx.get(served.url + reference)
            assert asset.status_code == 200, reference
            assert len(asset.content) > 0
        scripts = [r for r in references if r.endswith(".js")]
        bundle = httpx.get(served.url + scripts[0]).text
        assert ("SwaggerUIBundle" if page == "/docs" else "Redoc") in bundle
        if page == "/docs":
            # Swagger UI would otherwise send the document to validator.swagger.io.
            assert '"validatorUrl": null' in html.text
