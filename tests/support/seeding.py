"""What the page tests share: tracesets uploaded through the real ``Client``, signing in
through the page's own form, and the admin commands a test runs on the served data dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.support.paths import TESTDATA
from tests.support.served import Served
from tests.support.waiting import wait_until
from tracestore import jsontext, schemas
from tracestore.client import Client

CHAKRA_4 = TESTDATA / "chakra-allreduce-4ranks"


def chakra_ranks(*ranks: int) -> list[Path]:
    """The small Chakra all-reduce traces of these ranks (of 0..3)."""
    return [CHAKRA_4 / f"all_reduce.{rank}.et" for rank in ranks]


def upload(
    served: Served,
    name: str,
    files: list[Path],
    metadata_text: str,
    *,
    token: str | None = None,
    inspected: bool = True,
) -> schemas.Traceset:
    """A ready traceset with ``metadata_text`` stored exactly as written (jsontext keeps its
    numbers' text); with ``inspected``, once inspection has finished."""
    with Client(served.url, token or served.token) as client:
        traceset = client.upload_traceset(
            files, name=name, workload_metadata=jsontext.loads(metadata_text)
        )
    if inspected:
        wait_inspected(served, traceset.id, token)
    return traceset


def wait_inspected(served: Served, traceset_id: str, token: str | None = None) -> dict[str, Any]:
    def inspected() -> dict[str, Any] | None:
        answer = get_traceset(served, traceset_id, token).json()
        return answer if (answer.get("inspection") or {}).get("status") == "complete" else None

    return dict(wait_until(inspected, "inspection did not finish", timeout=30, every=0.1))


def get_traceset(served: Served, traceset_id: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or served.token}"}
    return httpx.get(f"{served.url}/api/v1/tracesets/{traceset_id}", headers=headers)


def sign_in(page: Page, served: Served, path: str = "/", token: str | None = None) -> None:
    """Open ``path`` and sign in through the page's form (the view at ``path`` then shows)."""
    page.goto(served.url + path)
    page.get_by_label("API token").fill(token or served.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def admin(data_dir: Path, *args: str, json_output: bool = True) -> Any:
    """``tracestore <args> --data-dir <data_dir> --json`` on the served data directory (its
    JSON answer; without ``json_output``, no --json and its text)."""
    done = subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *args, "--data-dir", str(data_dir)]
        + (["--json"] if json_output else []),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout) if json_output else done.stdout
