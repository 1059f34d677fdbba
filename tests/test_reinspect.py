"""``tracestore reinspect``: tracesets inspected by an older version (no census verdict, no
searchable facts, no analysis) inspected again by the workers, a small one's through an
``inspect`` job and a larger one's through a job per file, as a completion queues them. On
the test database: SQLite, or PostgreSQL in the PostgreSQL pass."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from tests.support.kineto_traces import dlrm_ranks
from tests.support.uploading import upload
from tests.support.world import LIST
from tracestore.cli import main
from tracestore.server import db, inspection, jobs
from tracestore.server.reinspection import reinspect_missing
from tracestore.server.services import Services

TWO = {"shape": {"rankCount": 2}}


def _reinspect(services: Services, *args: str) -> Result:
    """The command on the test's database, as an operator runs it on the service's."""
    env = {"TRACESTORE_DATABASE_URL": services.settings.resolved_database_url}
    words = ["reinspect", "--data-dir", str(services.settings.data_dir), *args]
    return CliRunner().invoke(main, words, env=env)


def _queued(services: Services, *args: str) -> dict[str, int]:
    result = _reinspect(services, *args, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _run_jobs(services: Services) -> None:
    """The workers' turn: the command's jobs were queued on the real clock."""
    services.clock.advance(minutes=1)  # type: ignore[attr-defined]
    services.wait_for_background()


def _as_if_inspected_by_an_old_version(services: Services, ids: list[str]) -> None:
    """What a version before the census facts and the analysis left: its inspection only."""
    with services.db.session() as session:
        for table in (db.TracesetFact, db.FileAnalysis, db.TracesetAnalysis):
            session.execute(delete(table).where(table.traceset_id.in_(ids)))
        session.execute(
            update(db.Traceset)
            .where(db.Traceset.id.in_(ids))
            .values(inspected_world_size=None, median_idle_pct=None, median_step_time_us=None)
        )


def _census(http: TestClient, **params: str) -> dict[str, str]:
    answer = http.get(LIST, params={"limit": "100", **params})
    assert answer.status_code == 200, answer.text
    return {item["id"]: item["census"] for item in answer.json()["items"]}


def _facts(services: Services, traceset_id: str) -> list[tuple[str, str]]:
    with services.db.session(write=False) as session:
        rows = session.execute(
            select(db.TracesetFact.fact, db.TracesetFact.value).where(
                db.TracesetFact.traceset_id == traceset_id
            )
        )
        return sorted((fact, value) for fact, value in rows)


def _analysis(http: TestClient, traceset_id: str) -> dict[str, Any]:
    answer = http.get(f"/api/v1/tracesets/{traceset_id}/analysis")
    assert answer.status_code == 200, answer.text
    return {**answer.json(), "analyzedAt": None}


def _jobs(services: Services) -> dict[str, tuple[str, str | None, str]]:
    with services.db.session(write=False) as session:
        return {
            job.id: (job.kind, job.subject, job.state)
            for job in session.scalars(select(db.Job).where(db.Job.kind != jobs.SWEEP))
        }


@pytest.fixture
def old_sets(
    http: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> dict[str, dict[str, Any]]:
    """A small traceset (one of two ranks: census fail) inspected by its completing request
    and a larger one (both ranks: pass) by a job per file, once inspected and analysed as
    today, then left as an older version would have left them. What today's version
    recorded is kept under ``before``."""
    files = {name: (data, "primary") for name, data in dlrm_ranks(2).items()}
    monkeypatch.setattr(
        inspection, "INLINE_INSPECTION_BYTES", max(len(d) for d, _ in files.values())
    )
    first = dict(list(files.items())[:1])
    small = upload(http, first, TWO, name="small")
    large = upload(http, files, TWO, name="large")
    assert small["inspection"]["status"] == "complete" and large["inspection"] is None
    services.wait_for_background()
    sets = {"small": small, "large": large}
    for traceset in sets.values():
        traceset["before"] = {
            "facts": _facts(services, traceset["id"]),
            "analysis": _analysis(http, traceset["id"]),
        }
        assert traceset["before"]["analysis"]["status"] == "complete"
    assert _census(http) == {small["id"]: "fail", large["id"]: "pass"}
    _as_if_inspected_by_an_old_version(services, [small["id"], large["id"]])
    return sets


def test_reinspect_missing_brings_an_old_versions_tracesets_up_to_date(
    http: TestClient, services: Services, old_sets: dict[str, dict[str, Any]]
) -> None:
    small, large = old_sets["small"]["id"], old_sets["large"]["id"]
    assert _census(http) == {small: "unknown", large: "unknown"}
    assert _census(http, **{"inspected.backend": "nccl"}) == {}
    assert {_analysis(http, small)["status"], _analysis(http, large)["status"]} == {"none"}
    known = _jobs(services)

    assert _queued(services, "--missing") == {"queued": 2, "underWay": 0}
    queued = {k: v for k, v in _jobs(services).items() if k not in known}
    # The path a completion takes for each size: an inspect job, or a job per file.
    assert sorted(queued.values()) == [
        (jobs.INSPECT, small, "queued"),
        (jobs.TRACE_FILE, f"{large}/0", "queued"),
        (jobs.TRACE_FILE, f"{large}/1", "queued"),
    ]
    shown = http.get(f"/api/v1/tracesets/{large}").json()
    assert {f["metadataStatus"] for f in shown["files"]} == {"pending"}
    # Again before the workers ran: nothing queued twice.
    assert _queued(services, "--missing") == {"queued": 0, "underWay": 2}
    assert len(_jobs(services)) == len(known) + 3

    _run_jobs(services)
    assert _census(http) == {small: "fail", large: "pass"}
    matched = _census(http, **{"inspected.backend": "nccl", "inspected.world_size": "2"})
    assert matched == {small: "fail", large: "pass"}
    for traceset in old_sets.values():
        before = traceset["before"]
        assert _facts(services, traceset["id"]) == before["facts"]  # replaced, not added to
        assert _analysis(http, traceset["id"]) == before["analysis"]
    ran = Counter(
        (kind, subject, state)
        for job_id, (kind, subject, state) in _jobs(services).items()
        if job_id not in known
    )
    assert ran == Counter(
        {
            (jobs.INSPECT, small, "done"): 1,
            (jobs.TRACE_FILE, f"{small}/0", "done"): 1,
            (jobs.ASSEMBLE, small, "done"): 1,
            (jobs.TRACE_FILE, f"{large}/0", "done"): 1,
            (jobs.TRACE_FILE, f"{large}/1", "done"): 1,
            (jobs.ASSEMBLE, large, "done"): 1,
        }
    )
    with services.db.session(write=False) as session:
        row = session.get(db.Traceset, large)
        assert row is not None and row.median_idle_pct is not None
        assert row.inspected_world_size == 2
    # Every census recorded now: nothing left to queue.
    assert _queued(services, "--missing") == {"queued": 0, "underWay": 0}


def test_reinspect_by_id_replaces_what_was_recorded(
    http: TestClient, services: Services, old_sets: dict[str, dict[str, Any]]
) -> None:
    small, large = old_sets["small"], old_sets["large"]
    _run_jobs(services)
    result = _reinspect(services, small["id"], large["id"], small["id"])
    assert result.exit_code == 0, result.output
    assert "queued the inspection and analysis of 2 tracesets" in result.stdout
    assert "`tracestore worker`" in result.stdout
    _run_jobs(services)
    for traceset in old_sets.values():
        assert _facts(services, traceset["id"]) == traceset["before"]["facts"]
        assert _analysis(http, traceset["id"]) == traceset["before"]["analysis"]
    # A traceset inspected today, inspected again: its results replaced, none duplicated.
    assert _queued(services, large["id"]) == {"queued": 1, "underWay": 0}
    _run_jobs(services)
    assert _facts(services, large["id"]) == large["before"]["facts"]
    assert _analysis(http, large["id"]) == large["before"]["analysis"]
    assert _census(http) == {small["id"]: "fail", large["id"]: "pass"}


def test_an_unknown_or_deleted_id_is_one_line_and_queues_nothing(
    http: TestClient, services: Services, old_sets: dict[str, dict[str, Any]]
) -> None:
    small, large = old_sets["small"]["id"], old_sets["large"]["id"]
    assert http.delete(f"/api/v1/tracesets/{large}").status_code == 204
    known = _jobs(services)
    unknown = _reinspect(services, small, "ts_nosuchset")
    assert unknown.exit_code == 1
    assert unknown.output.strip().splitlines() == ["Error: Traceset 'ts_nosuchset' not found"]
    deleted = _reinspect(services, small, large)
    assert deleted.exit_code == 1 and "Traceback" not in deleted.output
    assert deleted.output.strip().splitlines() == [
        f"Error: Traceset '{large}' is deleted: only a ready traceset is inspected again"
    ]
    assert _jobs(services) == known
    # --missing passes over the deleted one.
    assert _queued(services, "--missing") == {"queued": 1, "underWay": 0}


def test_ids_or_missing_one_of_them(services: Services) -> None:
    for args in ((), ("--missing", "ts_x")):
        result = _reinspect(services, *args)
        assert result.exit_code == 2 and "Give TRACESET_ID... or --missing" in result.output


def test_missing_pages_through_the_tracesets_a_batch_a_transaction(
    http: TestClient, services: Services, old_sets: dict[str, dict[str, Any]]
) -> None:
    report = reinspect_missing(services, batch=1)
    assert report.as_json() == {"queued": 2, "underWay": 0}
    services.wait_for_background()
    assert set(_census(http).values()) == {"pass", "fail"}
