"""upload-url's dry run, ``POST /api/v1/tracesets/upload-url/check`` (issue 42, item 5): for
generated bodies (workloadMetadata from tests/support/metadata_strategies.py, the body's
other members about their rules and the settings' limits) it gives upload-url's verdict, with
its status, code and very message, and the rank count upload-url derives; and it stores nothing: no
traceset, file or session row, nothing staged."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, example, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from tests.support.clock import FakeClock
from tests.support.metadata_strategies import metadata_values
from tests.support.tenancy import person, tenant_id, workspace_id
from tracestore import schemas
from tracestore.client.api import ApiClient
from tracestore.errors import ValidationError
from tracestore.server import db
from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.storage.local import LocalBlobStore

pytestmark = pytest.mark.slow  # hypothesis: hundreds of cases through the app

UPLOAD = "/api/v1/tracesets/upload-url"
CHECK = UPLOAD + "/check"
MAX_FILES = 3
MAX_UPLOAD = 6_000


@pytest.fixture
def limited(services: Services, admin_token: str, clock: FakeClock) -> Iterator[TestClient]:
    """The app with limits small enough for generated bodies to pass them."""
    small = services.settings.model_copy(
        update={"max_files_per_upload": MAX_FILES, "max_upload_size": MAX_UPLOAD}
    )
    shrunk = Services(
        settings=small, db=services.db, store=services.store, signer=services.signer, clock=clock
    )
    with TestClient(create_app(services=shrunk), raise_server_exceptions=False) as http:
        http.headers["Authorization"] = f"Bearer {admin_token}"
        yield http


def stored(services: Services) -> tuple[Any, ...]:
    """What an upload-url leaves behind: its rows, and the store's files."""
    with services.db.session(write=False) as session:
        counts = tuple(
            session.scalar(select(func.count()).select_from(table))
            for table in (db.Traceset, db.TracesetFile, db.UploadSession)
        )
    store = services.store
    assert isinstance(store, LocalBlobStore)
    return counts, sorted(str(p.relative_to(store.root)) for p in Path(store.root).rglob("*"))


def verdict(response: Any) -> tuple[int, str, str] | None:
    if response.status_code == 200:
        return None
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


file_specs = st.fixed_dictionaries(
    {
        "name": st.sampled_from(
            ["rank_0.json", "rank_1.json", "logs/a.log", "RANK_0.json", "../up", "", "a" * 300]
        ),
        "size": st.sampled_from([0, 1, 4_000, MAX_UPLOAD + 1, -1, 2.0, "3"]),
        "role": st.sampled_from(["primary", "supporting", "other"]),
    },
    optional={"sha256": st.sampled_from(["0" * 64, "xyz"])},
)
# Mostly files upload-url takes (some past the count and total limits), some it refuses.
good_files = st.lists(
    st.builds(
        lambda name, size, role: {"name": name, "size": size, "role": role},
        st.sampled_from(["rank_0.json", "rank_1.json", "rank_2.json", "logs/a.log"]),
        st.sampled_from([1, 2, 100, 4_000, 4_000]),
        st.sampled_from(["primary", "primary", "supporting"]),
    ),
    min_size=1,
    max_size=MAX_FILES + 1,
    unique_by=lambda spec: spec["name"],
)
# Mostly a declaration the rules accept (the rank count is the degrees' product).
declared = st.builds(
    lambda degrees, off: {
        "shape": {"rankCount": max(1, math.prod(degrees.values()) + off)},
        "parallelism": degrees,
    },
    st.sampled_from([{}, {"dp": 2}, {"dp": 2, "tp": 2}, {"tp": 8, "pp": 1}]),
    st.sampled_from([0, 0, 0, 1]),
)
bodies = st.fixed_dictionaries(
    {
        "workloadMetadata": st.one_of(declared, declared, declared, metadata_values),
        "name": st.sampled_from(["run"] * 8 + ["", "n" * 255, "n" * 256, "a\u0000b", 7]),
        "files": st.one_of(good_files, good_files, good_files, st.lists(file_specs, max_size=4)),
    },
    optional={
        "workspaceId": st.sampled_from(["mine", "ws_other"]),
        "ttlDays": st.sampled_from([1, 7, 30, 365, 2.0, 0, 366, "3"]),
        "tags": st.sampled_from([[], ["a"], ["a", "b"], ["c"], [""], ["t"] * 65]),
        "description": st.sampled_from(["d", "a run", "", "é" * 4096, "d" * 4097]),
    },
)
PRIMARY = {"name": "rank_0.json", "size": 2, "role": "primary"}


@seed(42)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies)
@example(body={"name": "run", "files": [PRIMARY], "workloadMetadata": {"shape": {"rankCount": 1}}})
@example(body={"name": "run", "files": [PRIMARY], "workloadMetadata": {"pad": "é" * 33_000}})
@example(body={"name": "run", "files": [PRIMARY], "workloadMetadata": {"pad": "é" * 32_700}})
@example(
    body={"name": "run", "files": [{"name": "a", "size": MAX_UPLOAD + 1, "role": "supporting"}]}
)
def test_the_dry_run_gives_upload_urls_verdict_and_stores_nothing(
    limited: TestClient, services: Services, body: dict[str, Any]
) -> None:
    if body.get("workspaceId") == "mine":
        body["workspaceId"] = workspace_id(services, tenant_id(services, "default"), "default")
    text = json.dumps(body).encode()
    before = stored(services)
    checked = limited.post(CHECK, content=text, headers={"Content-Type": "application/json"})
    assert stored(services) == before
    started = limited.post(UPLOAD, content=text, headers={"Content-Type": "application/json"})
    assert verdict(checked) == verdict(started), (checked.text, started.text)
    event(f"answered {started.status_code}")
    if started.status_code == 200:
        traceset = limited.get(f"/api/v1/tracesets/{started.json()['tracesetId']}").json()
        assert checked.json() == {
            "valid": True,
            "rankCount": traceset["rankCountDerived"],
            "warnings": started.json()["warnings"],  # upload-url's own
        }
    else:
        assert stored(services) == before


@pytest.mark.parametrize(
    "text",
    [b"", b"{nope", b"[]", b'{"name": "run"}', b'{"name": "run", "files": []}', b"{" * 70],
)
def test_a_body_that_is_not_an_upload_is_refused_alike(limited: TestClient, text: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    checked = limited.post(CHECK, content=text, headers=headers)
    assert checked.status_code == 400
    assert verdict(checked) == verdict(limited.post(UPLOAD, content=text, headers=headers))


def test_a_body_past_the_small_body_limit_is_judged_not_refused_as_too_large(
    http: TestClient, services: Services
) -> None:
    """The dry run takes the bodies upload-url takes: past the 1 MiB of other routes (many
    files with long names), as upload-url's own limit says."""
    files = [
        {"name": f"{'r' * 200}/{i:05d}.json", "size": 1, "role": "supporting"} for i in range(6_000)
    ]
    text = json.dumps({"name": "many", "files": files}).encode()
    assert len(text) > 1024 * 1024
    before = stored(services)
    checked = http.post(CHECK, content=text, headers={"Content-Type": "application/json"})
    assert checked.status_code == 200, checked.text[:300]
    assert checked.json() == {"valid": True, "rankCount": None, "warnings": []}
    assert stored(services) == before


def test_a_workspace_the_caller_is_not_in_is_refused_alike(
    http: TestClient, services: Services
) -> None:
    member = person(services, "checker", "default", ["default"])
    body = {"name": "x", "files": [PRIMARY | {"role": "supporting"}], "workspaceId": "ws_x"}
    checked = http.post(CHECK, json=body, headers=member.auth)
    assert checked.status_code == 403
    assert verdict(checked) == verdict(http.post(UPLOAD, json=body, headers=member.auth))


def test_the_clients_check_upload_answers_the_rank_count_or_raises_the_refusal(
    http: TestClient,
) -> None:
    token = str(http.headers["Authorization"]).removeprefix("Bearer ")
    with ApiClient(str(http.base_url), token, http=http) as client:
        request = schemas.TracesetUploadUrlRequest.model_validate(
            {"name": "run", "files": [PRIMARY], "workloadMetadata": {"parallelism": {"dp": 4}}}
        )
        assert client.check_upload(request) == schemas.UploadCheckAnswer(rank_count=4)
        refused = request.model_copy(update={"workload_metadata": None})
        with pytest.raises(ValidationError, match="must declare a rank count"):
            client.check_upload(refused)
