"""What the service stores and answers of an inspection stays bounded and valid (issue 41):
a traceset of hostile files keeps an inspection of at most TRACESTORE_MAX_INSPECTION_SIZE,
the GET and /libraries never parse it, a number past a double or 64 bits fails its file
alone (on SQLite and PostgreSQL), and no JSON column ever holds NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update

from tests.support import crafted
from tests.support.uploading import upload
from tracestore.client import Client
from tracestore.server import db
from tracestore.server.services import Services

ONE = {"shape": {"rankCount": 1}}
TWO = {"shape": {"rankCount": 2}}


def _strict(answer: str) -> Any:
    """Parse as JSON that has no NaN or Infinity."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in an answer: not JSON")

    return json.loads(answer, parse_constant=refuse)


def test_an_event_time_past_a_double_leaves_the_answer_json(
    http: TestClient, services: Services
) -> None:
    traceset = upload(
        http,
        {
            "far.json": (crafted.nonfinite_kineto(0), "primary"),
            "r1.json": (crafted.kineto_trace(1), "primary"),
        },
        TWO,
    )
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}")
    assert answer.status_code == 200
    got = _strict(answer.text)
    files = {f["name"]: f for f in got["inspection"]["files"]}
    assert files["far.json"]["status"] == "failed"
    assert "the time span (10 to inf us) is not finite" in files["far.json"]["reason"]
    assert files["r1.json"]["status"] == "complete"
    assert got["inspection"]["census"]["ranksFound"] == [0, 1]
    # The official client reads it (tracestore show, download).
    with Client("http://testserver", http.headers["Authorization"].split()[1], http=http) as client:
        assert client.get_traceset(traceset["id"]).inspection is not None


def test_a_rank_past_64_bits_fails_its_file_alone(http: TestClient, services: Services) -> None:
    """On SQLite the rank overflowed the rank_start column and the whole traceset's
    inspection was lost (retried, then given up); PostgreSQL's BIGINT the same."""
    traceset = upload(
        http,
        {
            "huge.json": (crafted.huge_rank_kineto(), "primary"),
            "r1.json": (crafted.kineto_trace(1), "primary"),
        },
        TWO,
    )
    got = _strict(http.get(f"/api/v1/tracesets/{traceset['id']}").text)
    assert got["inspection"]["status"] == "complete"
    by_name = {f["name"]: f for f in got["files"]}
    assert by_name["huge.json"]["metadataStatus"] == "failed"
    assert by_name["huge.json"]["rankRange"] is None
    assert by_name["r1.json"]["metadataStatus"] == "complete"
    assert by_name["r1.json"]["rankRange"] == {"start": 1, "end": 1}
    reason = {f["name"]: f for f in got["inspection"]["files"]}["huge.json"]["reason"]
    assert reason.startswith("distributedInfo rank 1000000000000000000000000000000 is out of")


def test_a_pid_past_64_bits_fails_its_file_alone(http: TestClient, services: Services) -> None:
    traceset = upload(http, {"et.json": (crafted.huge_pid_et(), "primary")}, ONE)
    got = _strict(http.get(f"/api/v1/tracesets/{traceset['id']}").text)
    (told,) = got["inspection"]["files"]
    assert (told["status"], told["pid"]) == ("failed", None)


def test_no_json_column_stores_nan_or_infinity(services: Services) -> None:
    """The last guard: a NaN that reaches a JSON column is an error where it is written."""
    refused = pytest.raises(Exception, match="Out of range float values are not JSON compliant")
    with refused, services.db.session() as session:
        session.execute(update(db.Traceset).values(inspection={"x": math.inf}))


def _settings(services: Services, **changes: Any) -> None:
    services.settings = services.settings.model_copy(update=changes)


def test_an_archive_of_many_members_stores_a_bounded_inspection(
    http: TestClient, services: Services
) -> None:
    """The issue's 2.5 MB .tar.gz of 300,000 rank-0 members stored 227 MB; every GET then
    parsed it (4.9 s, the event loop frozen 4.2 s)."""
    _settings(services, inspect_max_members=300, max_inspection_size=64 * 1024)
    data = crafted.many_members_tar_gz(2_000)
    traceset = upload(http, {"many.tar.gz": (data, "primary")}, ONE)
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}")
    got = _strict(answer.text)
    stored = got["inspection"]
    assert len(json.dumps(stored, ensure_ascii=False, separators=(",", ":"))) <= 64 * 1024
    assert stored["truncated"]["limit"] == 64 * 1024
    assert stored["truncated"]["size"] > 64 * 1024
    assert "TRACESTORE_MAX_INSPECTION_SIZE" in stored["truncated"]["message"]
    assert stored["census"]["checks"]["rankCountMatches"]["passed"] is False
    (archive,) = got["files"]
    assert archive["metadataStatus"] == "failed"
    with services.db.session(write=False) as session:
        row = session.query(db.TracesetFile).one()
        assert row.metadata_reason == (
            "inspected the first 300 members; 1,700 more were skipped (the limit of members "
            "inspected per archive)"
        )
        assert len(json.dumps(row.inspection)) <= 64 * 1024


def test_the_get_and_libraries_never_parse_the_stored_inspection(
    http: TestClient, services: Services
) -> None:
    """Each file's rank provenance is kept in its row: the GET splices the stored text,
    /libraries loads no inspection. Text no parser takes shows it."""
    if services.db.dialect == "postgresql":
        pytest.skip("PostgreSQL's json refuses text that is no JSON, which tells a parse here")
    traceset = upload(http, {"r0.json": (crafted.kineto_trace(0), "primary")}, ONE)
    before = _strict(http.get(f"/api/v1/tracesets/{traceset['id']}").text)
    told = before["files"][0]["rankProvenance"]
    assert told.startswith("the only primary file")
    unparsable = '{"rankProvenance": ' + "[" * 100_000
    with services.db.session() as session:
        session.execute(
            text("UPDATE tracesets SET inspection = :t WHERE id = :id"),
            {"t": unparsable, "id": traceset["id"]},
        )
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}")
    assert answer.status_code == 200
    assert unparsable in answer.text
    head = answer.text.split(',"inspection":')[0] + "}"
    assert json.loads(head)["files"][0]["rankProvenance"] == told
    assert http.get("/api/v1/libraries").status_code == 200
    assert http.get("/api/v1/tracesets").status_code == 200


def test_a_lone_surrogate_in_a_trace_is_stored_as_a_replacement_character(
    http: TestClient, services: Services
) -> None:
    """JSON's escape of a lone surrogate in a trace's strings (a backend, a group, a GPU, a
    collective) or a tar member name that is not UTF-8 made the whole traceset's inspection
    fail to store (UnicodeEncodeError), retried, then given up."""
    traceset = upload(
        http,
        {
            "r0.json": (crafted.surrogate_kineto(0), "primary"),
            "r1.tar": (crafted.surrogate_member_tar(), "primary"),
        },
        TWO,
    )
    answer = http.get(f"/api/v1/tracesets/{traceset['id']}")
    assert answer.status_code == 200
    answer.content.decode("utf-8")  # whole Unicode text
    got = _strict(answer.text)
    assert got["inspection"]["status"] == "complete"
    files = {f["name"]: f for f in got["inspection"]["files"]}
    assert files["r0.json"]["status"] == "complete"
    assert files["r0.json"]["backend"] == "nccl\ufffd"
    assert files["r0.json"]["processGroups"][0]["name"] == "g\ufffd"
    (member,) = files["r1.tar"]["members"]
    assert member["name"] == "\ufffd\ufffdx.json" and member["rank"] == 1
    assert got["inspection"]["census"]["ranksFound"] == [0, 1]
    assert "\ud800" not in json.dumps(got["inspection"]["summary"], ensure_ascii=False)
