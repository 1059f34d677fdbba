"""GET /api/v1/tracesets/{id}/compare (issue 45, item 2) on the test database (SQLite, or
PostgreSQL in the PostgreSQL pass): the answer is what the pure comparison of the same files
gives, from the stored analyses alone; both tracesets must be visible; a 409 while an
analysis is not complete or a rank's detail was not kept; selections refused by name; the
client's ``compare_tracesets`` and ``tracestore compare ID ID``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from tests.support.comparison_traces import BASE, OTHER, SOFTMAX, run
from tests.support.paths import TESTDATA
from tests.support.tenancy import person
from tests.support.uploading import upload
from tracestore import schemas
from tracestore.analysis import analyze_path
from tracestore.analysis.compare import compare_sides, side_of
from tracestore.cli import main
from tracestore.client import Client
from tracestore.errors import Conflict
from tracestore.server import db
from tracestore.server.services import Services
from tracestore.server.stored_json import members

KINETO = TESTDATA / "kineto-dlrm-8ranks"
_INFO = re.compile(rb'"distributedInfo": \{"backend": "nccl", "rank": \d+, "world_size": 8\}')


def _dlrm(shift: int = 0) -> dict[str, tuple[bytes, str]]:
    """The real 8-rank sample; with ``shift``, rank r is worker (r + shift) % 8's trace."""
    samples = sorted(KINETO.iterdir())
    files = {}
    for rank in range(8):
        data = samples[(rank + shift) % 8].read_bytes()
        info = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": 8}' % rank
        data, found = _INFO.subn(info, data)
        assert found == 1
        files[f"rank{rank}.pt.trace.json"] = (data, "primary")
    return files


def _local(tmp_path: Path, files: dict[str, tuple[bytes, str]], label: str) -> list[Any]:
    directory = tmp_path / label
    directory.mkdir()
    sides = []
    for name, (data, _) in files.items():
        (directory / name).write_bytes(data)
        outcome = analyze_path(directory / name, name)
        assert outcome.rank is not None
        sides.append(side_of(outcome.rank.rank, name, outcome.rank.analysis))
    return sorted(sides, key=lambda s: s.rank)


def _compare(http: TestClient, base: str, other: str, **params: str) -> Any:
    return http.get(f"/api/v1/tracesets/{base}/compare", params={"with": other, **params})


@pytest.fixture
def two(http: TestClient, services: Services, tmp_path: Path) -> tuple[str, str, list[Any]]:
    """The real sample and a copy of it with its ranks' traces rotated by one, analysed;
    and the local sides of both."""
    a, b = _dlrm(), _dlrm(1)
    first = upload(http, a, {"shape": {"rankCount": 8}})
    second = upload(http, b, {"shape": {"rankCount": 8}})
    services.wait_for_background()
    return first["id"], second["id"], [_local(tmp_path, a, "a"), _local(tmp_path, b, "b")]


def test_the_answer_is_the_pure_comparison_of_the_same_files(
    http: TestClient, services: Services, two: tuple[str, str, list[Any]]
) -> None:
    a, b, (mine, theirs) = two
    answer = _compare(http, a, b)
    assert answer.status_code == 200, answer.text
    expected = compare_sides((a, mine), (b, theirs))
    assert answer.json() == json.loads(json.dumps(expected))
    body = answer.json()
    assert [(r["baseRank"], r["otherRank"]) for r in body["ranks"]] == [(r, r) for r in range(8)]
    assert body["kernels"][0]["diffDurationUs"] >= body["kernels"][-1]["diffDurationUs"]
    # Chosen ranks and steps, as the pure code chooses them.
    some = _compare(http, a, b, baseRanks="0-1", otherRanks="6-7", steps="0-2147483646")
    assert some.status_code == 200, some.text
    assert [(r["baseRank"], r["otherRank"]) for r in some.json()["ranks"]] == [(0, 6), (1, 7)]
    rank_zero = _compare(http, a, a, baseRanks="0", otherRanks="1").json()
    # Worker 1's trace is rank 0 of the rotated copy: the same kernels, in either traceset.
    assert rank_zero["kernels"] == _compare(http, a, b, baseRanks="0").json()["kernels"]
    assert schemas.TracesetComparison.model_validate(body).ranks[3].other_rank == 3


def test_it_reads_no_file_again(
    http: TestClient,
    services: Services,
    two: tuple[str, str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, _ = two

    def refuse(sha256: str) -> Any:
        raise AssertionError(f"read {sha256} again")

    monkeypatch.setattr(services.store, "open_blob", refuse)
    assert _compare(http, a, b).status_code == 200


def test_both_must_be_visible(http: TestClient, services: Services) -> None:
    mine = upload(http, _dlrm(), {"shape": {"rankCount": 8}})
    outsider = person(services, "outsider", "elsewhere", ["theirs"])
    admin = http.headers["Authorization"]
    http.headers["Authorization"] = outsider.auth["Authorization"]
    theirs = upload(http, _dlrm(2), {"shape": {"rankCount": 8}})
    http.headers["Authorization"] = admin
    services.wait_for_background()
    for base, other, hidden in (
        (mine["id"], theirs["id"], theirs["id"]),
        (theirs["id"], mine["id"], theirs["id"]),
        (mine["id"], "ts_nope", "ts_nope"),
    ):
        answer = _compare(http, base, other)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["message"] == f"Traceset '{hidden}' not found"
    seen = http.get(
        f"/api/v1/tracesets/{theirs['id']}/compare",
        params={"with": theirs["id"]},
        headers=outsider.auth,
    )
    assert seen.status_code == 200, seen.text
    unauthenticated = http.get(
        f"/api/v1/tracesets/{mine['id']}/compare?with=x&steps=x", headers={"Authorization": ""}
    )
    assert unauthenticated.status_code == 401  # the token before the parameters


def test_an_analysis_not_complete_is_a_409_that_says_so(
    http: TestClient, services: Services
) -> None:
    a = upload(http, _dlrm(), {"shape": {"rankCount": 8}})
    b = upload(http, _dlrm(1), {"shape": {"rankCount": 8}})
    answer = _compare(http, a["id"], b["id"])  # the analysis jobs have not run yet
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["message"] == (
        f"Traceset '{a['id']}' has no complete analysis: it is pending: compare once it is complete"
    )
    services.wait_for_background()
    assert _compare(http, a["id"], b["id"]).status_code == 200
    with services.db.session() as session:  # as a rank whose detail passed its share
        row = session.get(db.FileAnalysis, (b["id"], 3))
        assert row is not None
        row.detail = None
        name = row.file
    answer = _compare(http, a["id"], b["id"])
    assert answer.status_code == 409
    assert answer.json()["error"]["message"].startswith(
        f"Traceset '{b['id']}': the per-step kernel totals of {name} were not kept"
    )
    assert _compare(http, a["id"], b["id"], baseRanks="0-2").status_code == 200
    chakra = TESTDATA / "chakra-allreduce-4ranks"
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(chakra.iterdir())}
    none = upload(http, files, {"shape": {"rankCount": 4}})
    answer = _compare(http, a["id"], none["id"])
    assert answer.status_code == 409
    assert answer.json()["error"]["message"] == (
        f"Traceset '{none['id']}' has no complete analysis: it is none "
        "(the traceset holds no Kineto trace)"
    )


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({"steps": "7-2"}, 400, "steps: the range '7-2' ends before it starts"),
        ({"steps": "2147483648"}, 400, "steps: step 2147483648 is beyond 2147483646"),
        ({"baseRanks": "x"}, 400, "baseRanks: 'x' is not a rank"),
        ({"otherRanks": ""}, 400, "otherRanks must list ranks"),
        ({"baseRanks": "9-12"}, 400, "baseRanks: no analysed rank of that traceset is in 9-12"),
        ({"baseRanks": "0-1", "otherRanks": "5"}, 400, "baseRanks chooses 2 ranks"),
    ],
)
def test_a_bad_selection_is_named(
    http: TestClient,
    two: tuple[str, str, list[Any]],
    params: dict[str, str],
    status: int,
    words: str,
) -> None:
    a, b, _ = two
    answer = _compare(http, a, b, **params)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"].startswith(words)


def test_with_is_required(http: TestClient) -> None:
    answer = http.get("/api/v1/tracesets/ts_x/compare")
    assert answer.status_code == 400
    assert "with" in answer.json()["error"]["message"]


def test_no_rank_in_common_is_a_409(http: TestClient, services: Services) -> None:
    files = []
    for ranks in ((0, 1), (2, 3)):
        traces = {
            f"r{rank}.json": (json.dumps(run(rank, BASE, world=4).trace()).encode(), "primary")
            for rank in ranks
        }
        files.append(upload(http, traces, {"shape": {"rankCount": 4}})["id"])
    services.wait_for_background()
    answer = _compare(http, *files)
    assert answer.status_code == 409
    assert "hold no rank in common" in answer.json()["error"]["message"]
    paired = _compare(http, *files, baseRanks="0-1", otherRanks="2-3").json()
    assert [(r["baseRank"], r["otherRank"]) for r in paired["ranks"]] == [(0, 2), (1, 3)]
    assert paired["added"] == paired["deleted"] == []


# --- the client and the command line ------------------------------------------------------


@pytest.fixture
def cli(http: TestClient, admin_token: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("TRACESTORE_URL", "TRACESTORE_TOKEN", "TRACESTORE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str) -> Result:
        words = ["compare", "--url", "http://testserver", *args, "--token", admin_token]
        return CliRunner().invoke(main, words, obj={"http": http})

    return invoke


@pytest.fixture
def small(http: TestClient, services: Services) -> tuple[str, str]:
    ids = []
    for steps in (BASE, OTHER):
        trace = json.dumps(run(0, steps, world=1).trace()).encode()
        ids.append(upload(http, {"r0.json": (trace, "primary")}, {"shape": {"rankCount": 1}})["id"])
    services.wait_for_background()
    return ids[0], ids[1]


def test_the_client_answers_the_model(
    http: TestClient, admin_token: str, small: tuple[str, str]
) -> None:
    with Client("http://testserver", admin_token, http=http) as client:
        answer = client.compare_tracesets(*small, steps="1-2")
        assert answer.added == [SOFTMAX] and answer.steps == "1-2"
        assert answer.ranks[0].base.steps == 2
        pending = upload(http, {"r.json": (b"{}", "primary")}, {"shape": {"rankCount": 1}})
        with pytest.raises(Conflict, match="has no complete analysis"):
            client.compare_tracesets(small[0], pending["id"])


def test_compare_ids_prints_the_services_object(cli: Any, small: tuple[str, str]) -> None:
    result = cli(*small, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["base"] == {"traceset": small[0], "ranks": [0]}
    assert answer["added"] == [SOFTMAX]
    text = cli(*small)
    assert text.exit_code == 0, text.output
    assert f"base {small[0]} → other {small[1]}" in text.stdout
    assert f"  added: {SOFTMAX}" in text.stdout


def test_compare_ids_names_a_refusal_in_one_line(cli: Any, small: tuple[str, str]) -> None:
    result = cli(small[0], "ts_nope")
    assert result.exit_code == 1
    assert "Error: Traceset 'ts_nope' not found" in result.output
    assert "Traceback" not in result.output
    result = cli(*small, "--steps", "x")
    assert result.exit_code == 1
    assert "Error: steps: 'x' is not a step or a range such as 0-7" in result.output


def test_stored_members_are_read_alone_and_never_from_inside_a_string() -> None:
    text = json.dumps(
        {
            "temporal": {"kernelTimeUs": 1},
            "kernels": [{"name": 'evil"steps":[9],"overlap":{}'}],
            "overlap": {"pct": None},
            "steps": [{"step": 2}],
        },
        separators=(",", ":"),
    )
    assert members(text, ("temporal", "overlap", "steps", "absent")) == {
        "temporal": {"kernelTimeUs": 1},
        "overlap": {"pct": None},
        "steps": [{"step": 2}],
    }
