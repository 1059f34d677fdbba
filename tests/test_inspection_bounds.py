"""Issue 41 through the real app: a file naming 100,000 GPU models is inspected in work
linear in them, and the searchable facts its traceset inserts are capped."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.inspect_fixtures import kineto_with_devices
from tests.uploading import upload
from tracestore.inspect.summary import MAX_DISTINCT_VALUES, SEARCH_FACTS
from tracestore.server import db
from tracestore.server.services import Services


@pytest.mark.timeout(120)  # a hang guard: the lists' membership tests took minutes here
def test_a_hundred_thousand_gpu_models_insert_a_capped_number_of_facts(
    http: TestClient, services: Services
) -> None:
    data, names = kineto_with_devices(100_000)
    traceset = upload(http, {"rank0.json": (data, "primary")}, {"shape": {"rankCount": 1}})
    summary = traceset["inspection"]["summary"]
    assert summary["gpuModels"] == names[:MAX_DISTINCT_VALUES]
    assert summary["valuesCut"] == {"gpuModels": 100_000 - MAX_DISTINCT_VALUES}
    with services.db.session(write=False) as session:
        rows = session.scalar(
            select(func.count())
            .select_from(db.TracesetFact)
            .where(db.TracesetFact.traceset_id == traceset["id"])
        )
    assert rows is not None and rows <= (len(SEARCH_FACTS) + 1) * MAX_DISTINCT_VALUES
    found = http.get("/api/v1/tracesets", params={"inspected.gpu_model": "GPU 00031"}).json()
    assert [item["id"] for item in found["items"]] == [traceset["id"]]
    cut = http.get("/api/v1/tracesets", params={"inspected.gpu_model": "GPU 00032"}).json()
    assert cut["items"] == []
