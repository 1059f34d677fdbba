"""A browser upload on a team's deployment (issue 43, item 1): two real `tracestore serve`
replicas on PostgreSQL and the S3-protocol server (moto), Chromium uploading through the page
of one, its parts PUT straight to the bucket, the traceset downloaded byte-exact through the
other. moto's blanket CORS is off, so only the bucket's own CORS rule (docs/deploy.md's) lets
the browser's PUTs through, as on a real store; the page's policy lets them out by default."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.replica_processes import (  # noqa: F401 - the postgres fixture
    PART,
    admin_token,
    bucket_replica_env,
    fresh_database,
    postgres,
    replica_env,
    replicas,
    start_replica,
    stop,
    wait_ready,
)
from tests.support.s3server import MotoServer
from tests.support.seeding import sign_in
from tests.support.served import Served
from tests.support.upload_page import make_folder, upload_folder
from tracestore.client import Client


@pytest.fixture(scope="module")
def strict_s3() -> Iterator[MotoServer]:
    """moto without its server-wide CORS: a browser may PUT only where a bucket's rule says."""
    with MotoServer(env={"MOTO_DISABLE_GLOBAL_CORS": "true"}) as server:
        yield server


DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _cors(origin: str) -> dict[str, Any]:
    """docs/deploy.md's CORS rule (PUT from the page's origin, the ETag exposed: the page
    reads it), for the page at ``origin``."""
    text = DEPLOY_DOC.read_text()
    rule: dict[str, Any] = json.loads(text.split("cat > cors.json <<'EOF'\n", 1)[1].split("EOF")[0])
    for each in rule["CORSRules"]:
        each["AllowedOrigins"] = [origin]
    return rule


def test_a_browser_upload_through_one_replica_downloads_byte_exact_through_another(
    postgres: str,  # noqa: F811
    strict_s3: MotoServer,
    page: Page,
    tmp_path: Path,
) -> None:
    bucket = strict_s3.new_bucket()
    env = bucket_replica_env(
        fresh_database(postgres),
        strict_s3,
        bucket,
    )
    with replicas(tmp_path, env, count=2) as (a, b):
        token = admin_token([a, b])
        # serve said where parts go, and what the bucket needs; nothing to warn of.
        log = a.output()
        assert f"Part and file URLs are the bucket's, at {strict_s3.endpoint_url}" in log
        assert "expose ETag (docs/deploy.md)" in log
        assert "Warning: the web page" not in log and "/blobs/..." not in log
        strict_s3.client().put_bucket_cors(Bucket=bucket, CORSConfiguration=_cors(a.url))

        folder = make_folder(tmp_path / "s3-run", {"rank0.json": PART + 1_234, "rank1.json": 4_321})
        puts: list[str] = []
        page.on("request", lambda r: puts.append(r.url) if r.method == "PUT" else None)
        sign_in(page, Served(a.url, token, {}), "/upload")
        upload_folder(page, folder, rank_count="2")
        page.wait_for_url("**/tracesets/ts_*", timeout=60_000)
        expect(page.get_by_role("heading", name="s3-run")).to_be_visible()
        # Where the upload lands says when it goes and how to keep it (item 2).
        expect(page.locator(".detail-head dl.head-facts")).to_contain_text(
            "after its last use (a download counts); promote it to keep it"
        )
        traceset_id = page.url.rsplit("/", 1)[-1]

        # Three parts (two of rank0.json), every one to the bucket, none to a replica.
        assert len(puts) == 3 and all(
            u.startswith(f"{strict_s3.endpoint_url}/{bucket}/") for u in puts
        ), puts
        stored = strict_s3.client().list_objects_v2(Bucket=bucket, Prefix="ts/blobs/")
        assert len(stored.get("Contents", [])) == 2

        with Client(b.url, token) as client:
            traceset = client.get_traceset(traceset_id)
            assert traceset.status == "ready" and traceset.expires_at is not None
            client.download_traceset(traceset_id, tmp_path / "back")
        for name in ("rank0.json", "rank1.json"):
            back = (tmp_path / "back" / name).read_bytes()
            assert (
                hashlib.sha256(back).digest()
                == hashlib.sha256((folder / name).read_bytes()).digest()
            ), name


def test_serve_warns_when_the_setting_leaves_the_bucket_out_of_the_pages_reach(
    postgres: str,  # noqa: F811
    strict_s3: MotoServer,
    tmp_path: Path,
) -> None:
    bucket = strict_s3.new_bucket()
    env = bucket_replica_env(
        fresh_database(postgres),
        strict_s3,
        bucket,
        TRACESTORE_WEB_CONNECT_ORIGINS="https://elsewhere.example",
    )
    replica = start_replica(tmp_path / "replica", env)
    try:
        wait_ready(replica)
        warnings = [line for line in replica.output().splitlines() if "Warning:" in line]
    finally:
        stop(replica)
    assert warnings == [
        "Warning: the web page may not send parts to the bucket at "
        f"{strict_s3.endpoint_url} (its Content-Security-Policy), so uploads from the browser "
        "stall: set TRACESTORE_WEB_CONNECT_ORIGINS=https://elsewhere.example,"
        f"{strict_s3.endpoint_url}, or unset it (the bucket's origin is the default); the "
        "bucket's CORS must also allow PUT from the page's origin and expose ETag "
        "(docs/deploy.md)"
    ]


def test_a_bucket_without_the_cors_rule_is_named_while_the_page_waits(
    postgres: str,  # noqa: F811
    strict_s3: MotoServer,
    page: Page,
    tmp_path: Path,
) -> None:
    """The issue's stall ("0 B ... trying again in 8.0 s (try 7)"): with no CORS rule on the
    bucket the browser gets no answer it may read, and the page says where it is sending and
    what the bucket's rule must allow, not just that nothing answered."""
    bucket = strict_s3.new_bucket()
    env = bucket_replica_env(
        fresh_database(postgres),
        strict_s3,
        bucket,
    )
    with replicas(tmp_path, env, count=1) as (replica,):
        sign_in(page, Served(replica.url, admin_token([replica]), {}), "/upload")
        upload_folder(page, make_folder(tmp_path / "run", {"rank0.json": 1_000}))
        expect(
            page.get_by_text(
                f"Sending rank0.json to the bucket at {strict_s3.endpoint_url} (if this lasts, "
                f"its CORS rule must allow PUT from {replica.url} and expose ETag: "
                "docs/deploy.md): no answer yet; trying again in"
            )
        ).to_be_visible()
