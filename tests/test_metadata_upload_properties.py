"""Property tests (hypothesis) of the upload metadata rules against the model of them in
tests/support/metadata_model.py (the upload rules). For arbitrary JSON as workloadMetadata
(tests/support/metadata_strategies.py) the service's verdict, error code and whole message equal the
model's, and an accepted upload's rank count and stored metadata are the model's too: in the
pure rules and through the upload-url route. Fixed seed: the same cases every run. Promotion's
rules: test_metadata_promotion_properties.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.metadata_model import TOO_DEEP, answered, depth, model, refused, verdict_event
from tests.support.metadata_strategies import metadata_values
from tracestore.errors import ValidationError
from tracestore.metadata import check_upload_metadata

pytestmark = pytest.mark.slow  # hypothesis: thousands of cases


@seed(15)
@settings(max_examples=1500, deadline=None)
@given(metadata=metadata_values, has_primary=st.booleans())
def test_the_rules_give_the_models_verdict(metadata: Any, has_primary: bool) -> None:
    rank_count, refusal = model(metadata, has_primary)
    verdict_event(refusal)
    try:
        derived = check_upload_metadata(metadata, has_primary_files=has_primary)
    except ValidationError as exc:
        assert refusal is not None, f"refused {metadata!r}: {exc.message}"
        assert (exc.status, exc.code, exc.message) == refusal
    else:
        assert refusal is None, f"accepted {metadata!r}; the model says {refusal!r}"
        assert derived == rank_count


@seed(15)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(metadata=metadata_values)
def test_the_service_gives_the_models_verdict(http: TestClient, metadata: Any) -> None:
    body: dict[str, Any] = {
        "name": "property",
        "files": [{"name": "rank_0.json", "size": 2, "role": "primary"}],
        "workloadMetadata": metadata,
    }
    rank_count, refusal = model(metadata, True)
    if depth(body) > 64:
        refusal = refused(TOO_DEEP)
    verdict_event(refusal)
    response = http.post("/api/v1/tracesets/upload-url", json=body)
    assert answered(response) == refusal, response.text
    if refusal is None:
        traceset = http.get(f"/api/v1/tracesets/{response.json()['tracesetId']}").json()
        assert traceset["rankCountDerived"] == rank_count
        assert traceset["workloadMetadata"] == metadata
