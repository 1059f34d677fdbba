"""Schema fuzzing (issue 15): schemathesis against the live OpenAPI description of a real
`tracestore serve`, authenticated, every operation, with a fixed seed. Whatever it sends, the
service answers no 5xx, answers only statuses, bodies, content types and headers the
description documents for the operation, and logs no traceback. The one deliberate 5xx, ``POST
/api/v1/tracesets`` (501, as the reference API answers), is checked on its own.

The path parameters point at a real traceset and a real open upload session, so the
operations behind them are reached, not only their 404s. A longer run: docs/testing.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.envelopes import assert_error
from tests.support.served import Served, serving, unmeasured
from tracestore.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.engine_independent]

SEED = 20261201
# Examples per operation and phase: about 2,800 requests in all, about a minute here (the
# server and schemathesis run outside coverage).
MAX_EXAMPLES = int(os.environ.get("TRACESTORE_FUZZ_EXAMPLES", "100"))
# No 5xx, and every answer as the description documents it: its status listed for the
# operation, its body of the documented schema and content type, its documented headers; a
# 405 with Allow for any other method; data the description refuses is refused, and data it
# allows accepted but where a rule it cannot state refuses it (tests/support/schema_fuzz_checks.py).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "response_schema_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "unsupported_method",
    "negative_data_rejection",
    "described_data_accepted",
)
REPO = Path(__file__).resolve().parents[1]


def _seeded(served: Served, tmp_path: Path) -> dict[str, str]:
    """A ready traceset, its library and an open upload session: the
    parameters that operations working on an existing resource are given, so that they
    answer more than 404."""
    source = tmp_path / "traces"
    source.mkdir()
    for rank in range(2):
        (source / f"rank_{rank}.json").write_text(
            json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": []})
        )
    with Client(served.url, served.token) as client:
        traceset = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 2}})
    started = httpx.post(
        f"{served.url}/api/v1/tracesets/upload-url",
        headers={"Authorization": f"Bearer {served.token}"},
        json={"name": "open", "files": [{"name": "a.bin", "size": 10, "role": "supporting"}]},
    )
    started.raise_for_status()
    with served.api() as api:
        libraries = api.get("/api/v1/libraries").json()["items"]
    assert libraries, "the seeded traceset makes a library"
    return {
        "traceset_id": traceset.id,
        "library_id": str(libraries[0]["id"]),
        "upload_id": str(started.json()["uploadId"]),
    }


# The download route's file (the resume route has a ``file`` parameter of its own).
DOWNLOAD = 'include-name = "GET /api/v1/tracesets/{traceset_id}/download"'


# The subprocess's own limit (600 s) governs: on a loaded machine the run took 300 s once.
@pytest.mark.timeout(660)
def test_no_generated_request_gets_a_server_error(tmp_path: Path) -> None:
    with serving(tmp_path / "data", measured=False) as served:
        parameters = _seeded(served, tmp_path)
        config = tmp_path / "schemathesis.toml"
        config.write_text(
            f'headers = {{ Authorization = "Bearer {served.token}" }}\n'
            "[parameters]\n"
            + "".join(f'{name} = "{value}"\n' for name, value in parameters.items())
            + f'[[operations]]\n{DOWNLOAD}\nparameters = {{ file = "rank_0.json" }}\n'
        )
        st = Path(sys.executable).with_name("st")
        run = subprocess.run(
            [
                *(str(st), "--config-file", str(config), "run", f"{served.url}/openapi.json"),
                *("--checks", ",".join(CHECKS), "--seed", str(SEED)),
                *("--max-examples", str(MAX_EXAMPLES), "--workers", "1"),
                *("--exclude-name", "POST /api/v1/tracesets", "--no-color"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            env={
                **unmeasured(dict(os.environ)),
                "SCHEMATHESIS_HOOKS": "tests.support.schema_fuzz_checks",
                "PYTHONPATH": str(REPO),
            },
        )
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "generated" in run.stdout  # it did run cases
        answer = httpx.post(
            f"{served.url}/api/v1/tracesets",
            headers={"Authorization": f"Bearer {served.token}"},
        )
        assert_error(answer, 501, "NOT_IMPLEMENTED")
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log[-4000:]
