"""Property tests (hypothesis) of promotion's metadata rules against the model of them in
tests/support/metadata_model.py (promotion's, then the rank guard). For arbitrary JSON as
workloadMetadata (tests/support/metadata_strategies.py) the service's verdict, error code and whole
message equal the model's, and promoted metadata is stored as given: in the pure rules and
through the promote route, on a fresh ready traceset holding no, 1 or 8 ranks. Fixed seed: the
same cases every run. The upload rules: test_metadata_upload_properties.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.metadata_model import (
    answered,
    declared_by,
    promote_route_model,
    promotion_model,
    verdict_event,
)
from tests.support.metadata_strategies import promotion_metadata
from tests.support.uploading import upload
from tracestore.errors import UnprocessableEntity
from tracestore.metadata import check_promotion_metadata

pytestmark = pytest.mark.slow  # hypothesis: thousands of cases


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=promotion_metadata, held=st.sampled_from(["declared", None, 1, 8, 64]))
def test_promotion_gives_the_models_verdict(metadata: Any, held: Any) -> None:
    if held == "declared":
        held = declared_by(metadata)
    refusal = promotion_model(metadata, held)
    verdict_event(refusal)
    try:
        check_promotion_metadata(metadata, traceset_id="ts_x", held_rank_count=held)
    except UnprocessableEntity as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert (exc.status, exc.code, exc.message) == refusal
    else:
        assert refusal is None, f"accepted {metadata!r}; the model says {refusal!r}"


HELD_UPLOADS: dict[Any, tuple[dict[str, tuple[bytes, str]], Any]] = {
    None: ({"notes.txt": (b"no ranks", "supporting")}, None),
    1: ({"rank_0.json": (b"{}", "primary")}, {"shape": {"rankCount": 1}}),
    8: (
        {f"rank_{i}.json": (b"{}", "primary") for i in range(8)},
        {"parallelism": {"dp": 8}},
    ),
}


@seed(15)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    metadata=promotion_metadata.filter(lambda value: value is not None),
    held=st.sampled_from([None, 1, 8]),
)
def test_the_promote_route_gives_the_models_verdict(
    http: TestClient, metadata: Any, held: Any
) -> None:
    # A fresh ready traceset per case: a promoted one would answer "already there".
    files, stored = HELD_UPLOADS[held]
    traceset_id = upload(http, files, stored)["id"]
    refusal = promote_route_model(metadata, held)
    verdict_event(refusal)
    if refusal is not None:
        status, code, message = refusal
        refusal = status, code, message.replace("traceset ts_x", f"traceset {traceset_id}")
    response = http.post(
        f"/api/v1/tracesets/{traceset_id}/promote",
        # The files record no rank: force spares the census, which is not the subject here.
        json={"target": "tenant", "workloadMetadata": metadata, "force": True},
    )
    assert answered(response) == refusal, response.text
    if refusal is None:
        assert response.json()["promotionApplied"] is True
        promoted = http.get(f"/api/v1/tracesets/{traceset_id}").json()
        assert promoted["scope"] == "tenant"
        assert promoted["workloadMetadata"] == metadata
