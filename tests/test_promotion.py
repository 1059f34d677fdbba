"""POST /api/v1/tracesets/{id}/promote (docs/api.md), through real HTTP on the real app.

The first block has one test per promotion sentence of the reference API's page on workload
metadata (not in this repository; tracestore.metadata words its rules); the rest pins the
contract: check order, statuses, idempotence, what is replaced, and who may promote.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import update

from tests.support.clock import FakeClock
from tests.support.envelopes import assert_error
from tests.support.paths import TESTDATA
from tests.support.tenancy import RANKS_256, UPLOAD_URL, person, start_upload, upload_ready
from tests.support.uploading import upload
from tracestore.errors import ERRORS_BY_STATUS
from tracestore.server import db
from tracestore.server.services import Services

DDP = TESTDATA / "pytorch213-ddp-gloo-4ranks" / "ddp"


def promote(http: httpx.Client, traceset_id: str, body: Any = None, **kw: Any) -> httpx.Response:
    """POST promote; ``body`` a value (sent as JSON) or a text (sent exactly as written)."""
    content = b"" if body is None else (body if isinstance(body, str) else json.dumps(body))
    return http.post(
        f"/api/v1/tracesets/{traceset_id}/promote",
        content=content.encode() if isinstance(content, str) else content,
        headers={"Content-Type": "application/json", **kw.pop("headers", {})},
    )


def error(response: httpx.Response, status: int) -> str:
    return assert_error(response, status, ERRORS_BY_STATUS[status].code)["message"]


def stored(http: httpx.Client, traceset_id: str) -> dict[str, Any]:
    answer = http.get(f"/api/v1/tracesets/{traceset_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


# --- one test per seed sentence on promotion -----------------------------------------

# What a refusal of the metadata upload stored adds: where the member is, and the way on.
STORED = (
    " (in the workloadMetadata stored at upload, which keeps members as given); promote with"
    " workloadMetadata in the request body that corrects it"
)


def test_cp_stored_unchecked_at_upload_makes_promotion_fail(http: TestClient) -> None:
    """'a member that upload stored without checking, such as a cp that is not a whole
    number, can make promotion fail.'"""
    metadata = '{"parallelism": {"dp": 32, "tp": 8, "cp": 2.5}, "shape": {"rankCount": 256}}'
    ts = upload_ready(http, metadata)
    assert ts["workloadMetadata"]["parallelism"]["cp"] == 2.5

    message = error(promote(http, ts["id"]), 422)

    assert message == (
        "workloadMetadata.parallelism.cp must be a whole number of at least 1, got 2.5" + STORED
    )
    after = stored(http, ts["id"])
    assert after["scope"] == "workspace"
    assert '"cp":2.5' in http.get(f"/api/v1/tracesets/{ts['id']}").text


def test_parallelism_without_any_of_the_five_degrees_is_refused(http: TestClient) -> None:
    """'A parallelism object that holds none of dp, tp, sp, ep and pp declares nothing,
    and promotion refuses such a parallelism.'"""
    ts = upload_ready(http, {"parallelism": {"cp": 2}}, role="supporting")
    assert ts["rankCountDerived"] is None

    message = error(promote(http, ts["id"]), 422)

    assert message == (
        'workloadMetadata.parallelism must hold at least one of dp, tp, sp, ep, pp, got {"cp":2}'
        + STORED
    )


def test_fsdp_that_does_not_divide_dp_is_refused(http: TestClient) -> None:
    """'fsdp ... divides dp rather than adding ranks' and 'promotion checks cp and fsdp'."""
    ts = upload_ready(http, {"parallelism": {"dp": 8, "fsdp": 3}})

    message = error(promote(http, ts["id"]), 422)

    assert message == "workloadMetadata.parallelism.fsdp 3 must divide dp 8" + STORED


def test_shape_rank_count_that_differs_from_the_product_is_refused(http: TestClient) -> None:
    """'Promotion's member checks do read a shape.rank_count, and refuse one that differs
    from the parallelism product.'"""
    ts = upload_ready(http, {"parallelism": {"dp": 32, "tp": 8}, "shape": {"rank_count": 255}})
    assert ts["rankCountDerived"] == 256  # upload does not read rank_count

    message = error(promote(http, ts["id"]), 422)

    assert message == (
        "workloadMetadata.shape.rank_count 255 differs from the parallelism product 256"
        " (dp × tp × sp × ep × pp)" + STORED
    )


def test_new_metadata_declaring_another_rank_count_is_refused(http: TestClient) -> None:
    """'promotion can refuse it unless it declares ... the same rank count the traceset
    holds' — 128 for a 256-rank traceset, naming both counts."""
    ts = upload_ready(http, RANKS_256)

    response = promote(http, ts["id"], {"workloadMetadata": {"shape": {"rankCount": 128}}})

    assert error(response, 422) == (
        f"workloadMetadata declares rank count 128, but traceset {ts['id']} holds 256;"
        " a rank count cannot be changed after upload"
    )
    after = stored(http, ts["id"])
    assert after["workloadMetadata"] == RANKS_256
    assert after["scope"] == "workspace"


def test_new_metadata_declaring_none_for_a_traceset_holding_256_is_refused(
    http: TestClient,
) -> None:
    """'... the same rank count the traceset holds' — a declaration is needed when it holds one."""
    ts = upload_ready(http, RANKS_256)

    response = promote(http, ts["id"], {"workloadMetadata": {"workload_family": "llm"}})

    assert error(response, 422) == (
        f"workloadMetadata declares no rank count, but traceset {ts['id']} holds 256;"
        " a rank count cannot be changed after upload"
    )


def test_new_metadata_declaring_64_for_a_traceset_holding_none_is_refused(
    http: TestClient,
) -> None:
    """'... (none, if it holds none)'."""
    ts = upload_ready(http, {"workload_family": "llm"}, role="supporting")

    response = promote(http, ts["id"], {"workloadMetadata": {"shape": {"rankCount": 64}}})

    assert error(response, 422) == (
        f"workloadMetadata declares rank count 64, but traceset {ts['id']} holds no rank count;"
        " a rank count cannot be changed after upload"
    )


def test_snake_case_descriptive_members_are_read_camel_case_ignored(http: TestClient) -> None:
    """'Where it reads them, it reads snake_case ... traceset promotion ... does.'"""
    camel = upload_ready(http, {**RANKS_256, "workloadFamily": 7, "modelName": ["x"]})
    snake = upload_ready(http, {**RANKS_256, "workload_family": 7})

    applied = promote(http, camel["id"])
    refused = promote(http, snake["id"])

    assert applied.status_code == 200, applied.text
    assert error(refused, 422) == (
        "workloadMetadata.workload_family must be a string, got 7" + STORED
    )


# --- the contract ----------------------------------------------------------------------


def test_promotion_replaces_metadata_exactly_as_given_and_clears_expiry(
    http: TestClient,
) -> None:
    ts = upload_ready(http, RANKS_256, description="before", tags=["a"])
    assert ts["expiresAt"] is not None
    new = (
        '{"workload_family": "llm", "zeta": 1e3, "shape": {"rankCount": 256, "lr": 2.0},'
        ' "alpha": [1.50, "ü"]}'
    )

    answer = promote(
        http,
        ts["id"],
        f'{{"target": "tenant", "workloadMetadata": {new}, "description": "after",'
        ' "tags": ["b", "c"]}',
    )

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"id": ts["id"], "scope": "tenant", "promotionApplied": True}
    raw = http.get(f"/api/v1/tracesets/{ts['id']}").text
    assert (
        '"workloadMetadata":{"workload_family":"llm","zeta":1e3,'
        '"shape":{"rankCount":256,"lr":2.0},"alpha":[1.50,"ü"]}'
    ) in raw
    after = json.loads(raw)
    assert after["scope"] == "tenant"
    assert after["expiresAt"] is None
    assert after["description"] == "after"
    assert after["tags"] == ["b", "c"]
    assert after["rankCountDerived"] == 256


def test_stored_metadata_is_kept_when_none_is_given(http: TestClient) -> None:
    metadata = '{"shape": {"rankCount": 256}, "note": 1.0}'
    ts = upload_ready(http, metadata, description="kept", tags=["t"])

    answer = promote(http, ts["id"], {})

    assert answer.json()["promotionApplied"] is True
    after = stored(http, ts["id"])
    assert after["description"] == "kept"
    assert after["tags"] == ["t"]
    assert (
        '"workloadMetadata":{"shape":{"rankCount":256},"note":1.0}'
        in http.get(f"/api/v1/tracesets/{ts['id']}").text
    )


def test_empty_body_promotes_to_tenant(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)

    answer = promote(http, ts["id"])

    assert answer.json() == {"id": ts["id"], "scope": "tenant", "promotionApplied": True}


def test_already_at_target_answers_200_and_changes_nothing(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)
    assert promote(http, ts["id"]).status_code == 200
    before = stored(http, ts["id"])

    again = promote(
        http,
        ts["id"],
        {"target": "tenant", "description": "ignored", "workloadMetadata": {"shape": {}}},
    )

    assert again.status_code == 200, again.text
    assert again.json() == {"id": ts["id"], "scope": "tenant", "promotionApplied": False}
    assert stored(http, ts["id"]) == before


def test_tenant_to_public_then_public_again(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)
    assert promote(http, ts["id"]).status_code == 200

    public = promote(http, ts["id"], {"target": "public"})
    again = promote(http, ts["id"], {"target": "public"})

    assert public.json() == {"id": ts["id"], "scope": "public", "promotionApplied": True}
    assert again.json() == {"id": ts["id"], "scope": "public", "promotionApplied": False}


def test_unknown_traceset_is_404_before_a_bad_target(http: TestClient) -> None:
    response = promote(http, "ts_doesnotexist", {"target": "everyone"})

    assert error(response, 404) == "Traceset 'ts_doesnotexist' not found"


def test_bad_target_is_400_before_a_traceset_that_is_not_ready(http: TestClient) -> None:
    answer = start_upload(http, RANKS_256)

    response = promote(http, answer["tracesetId"], {"target": "everyone"})

    assert error(response, 400) == "target must be 'tenant' or 'public', got \"everyone\""


def test_malformed_bodies_are_400(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)

    assert "not valid JSON" in error(promote(http, ts["id"], "{"), 400)
    assert error(promote(http, ts["id"], "[]"), 400) == "Request body must be a JSON object"
    assert "tags" in error(promote(http, ts["id"], {"tags": ["x"] * 65}), 400)
    assert "target" in error(promote(http, ts["id"], {"target": 1}), 400)
    assert stored(http, ts["id"])["scope"] == "workspace"


def test_not_ready_is_409_before_a_bad_transition(http: TestClient) -> None:
    answer = start_upload(http, RANKS_256)

    response = promote(http, answer["tracesetId"], {"target": "public"})

    assert error(response, 409) == (
        f"Traceset '{answer['tracesetId']}' is uploading; only a ready traceset can be promoted"
    )


def test_deleted_traceset_is_409(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)
    assert http.delete(f"/api/v1/tracesets/{ts['id']}").status_code == 204

    assert "is deleted" in error(promote(http, ts["id"]), 409)


def test_skipping_a_step_is_412_before_missing_metadata(http: TestClient) -> None:
    ts = upload_ready(http, None, role="supporting")

    response = promote(http, ts["id"], {"target": "public"})

    assert error(response, 412) == (
        f"Traceset '{ts['id']}' is workspace; it cannot be promoted to public: promotion goes"
        " one step up (workspace → tenant → public); promote it to tenant first"
    )


def test_no_metadata_in_body_nor_stored_is_412_before_metadata_checks(
    http: TestClient,
) -> None:
    ts = upload_ready(http, None, role="supporting")

    response = promote(http, ts["id"], {"workloadMetadata": None, "description": "x"})

    assert error(response, 412) == (
        f"Traceset '{ts['id']}' has no workloadMetadata; promotion needs it: send"
        " workloadMetadata in the request body"
    )
    assert stored(http, ts["id"])["description"] is None


def test_metadata_given_for_a_traceset_without_any(http: TestClient) -> None:
    ts = upload_ready(http, None, role="supporting")

    answer = promote(http, ts["id"], {"workloadMetadata": {"workload_family": "llm"}})

    assert answer.status_code == 200, answer.text
    assert stored(http, ts["id"])["workloadMetadata"] == {"workload_family": "llm"}


def test_refused_metadata_changes_nothing(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256, description="old")
    body = {
        "workloadMetadata": {**RANKS_256, "shape": {"rankCount": 256, "seq_len": 0}},
        "description": "new",
        "tags": ["new"],
    }

    message = error(promote(http, ts["id"], body), 422)

    assert message == "workloadMetadata.shape.seq_len must be a whole number of at least 1, got 0"
    after = stored(http, ts["id"])
    assert (after["scope"], after["description"], after["tags"]) == ("workspace", "old", [])
    assert after["workloadMetadata"] == RANKS_256
    assert after["expiresAt"] is not None


def test_new_metadata_must_be_an_object_and_within_the_size_limit(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)
    big = {**RANKS_256, "pad": "x" * 65_536}

    assert error(promote(http, ts["id"], {"workloadMetadata": [1]}), 422) == (
        "workloadMetadata must be an object, got [1]"
    )
    assert "larger than 65,536 bytes when serialized" in error(
        promote(http, ts["id"], {"workloadMetadata": big}), 422
    )


def test_public_needs_a_tenant_admin(http: TestClient, services: Services) -> None:
    member = person(services, "member", "default", ["default"])
    ts = upload_ready(http, RANKS_256)
    assert promote(http, ts["id"], headers=member.auth).status_code == 200

    response = promote(http, ts["id"], {"target": "public"}, headers=member.auth)

    assert error(response, 403) == "Promotion to public needs a tenant admin"
    assert stored(http, ts["id"])["scope"] == "tenant"
    assert promote(http, ts["id"], {"target": "public"}).status_code == 200


def test_a_caller_who_sees_but_cannot_write_gets_404(http: TestClient, services: Services) -> None:
    outsider = person(services, "other-team", "default", ["other"], admin=True)
    ts = upload_ready(http, RANKS_256)
    assert promote(http, ts["id"]).status_code == 200
    assert http.get(f"/api/v1/tracesets/{ts['id']}", headers=outsider.auth).status_code == 200

    response = promote(http, ts["id"], {"target": "public"}, headers=outsider.auth)

    assert error(response, 404) == f"Traceset '{ts['id']}' not found"


def test_promote_needs_a_token(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)

    response = promote(http, ts["id"], headers={"Authorization": ""})

    assert error(response, 401) == "Invalid or missing authentication token"


def test_openapi_documents_the_promote_route(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    operation = document["paths"]["/api/v1/tracesets/{traceset_id}/promote"]["post"]
    request = document["components"]["schemas"]["PromoteRequest"]

    assert {"200", "404", "409", "412", "422"} <= set(operation["responses"])
    assert set(request["properties"]) == {
        "target",
        "workloadMetadata",
        "description",
        "tags",
        "force",
    }


def test_concurrent_promotions_apply_once(http: TestClient) -> None:
    ts = upload_ready(http, RANKS_256)

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: promote(http, ts["id"]), range(4)))

    assert [a.status_code for a in answers] == [200] * 4
    assert sorted(a.json()["promotionApplied"] for a in answers) == [False, False, False, True]


def test_a_traceset_past_its_expiry_is_410_as_for_download(
    http: TestClient, clock: FakeClock
) -> None:
    ts = upload_ready(http, RANKS_256, ttlDays=1)
    clock.advance(days=1)

    response = promote(http, ts["id"])

    assert error(response, 410) == (f"Traceset '{ts['id']}' expired at {ts['expiresAt']}")
    assert http.get(f"/api/v1/tracesets/{ts['id']}/download").status_code == 410


def test_numbers_beyond_the_float_range_are_kept_as_written(http: TestClient) -> None:
    ts = upload_ready(http, '{"x": 1e400, "shape": {"rankCount": 256}}')

    answer = promote(
        http, ts["id"], '{"workloadMetadata": {"y": -1e999, "shape": {"rankCount": 256}}}'
    )

    assert answer.status_code == 200, answer.text
    assert (
        '"workloadMetadata":{"y":-1e999,"shape":{"rankCount":256}}'
        in http.get(f"/api/v1/tracesets/{ts['id']}").text
    )


# --- the census (issue 43, item 8) ------------------------------------------------------


def _validated(http: httpx.Client, traceset_id: str) -> dict[str, Any]:
    answer = http.post(f"/api/v1/tracesets/{traceset_id}/validate")
    assert answer.status_code == 200, answer.text
    return {check["name"]: check for check in answer.json()["checks"]}


def test_a_traceset_whose_census_fails_is_refused_unless_forced(http: TestClient) -> None:
    # Two primary files that record no rank, for 2 declared ranks: 2 of 2 ranks missing.
    blank = b'{"traceEvents": []}'
    files = {"a.json": (blank, "primary"), "b.json": (blank, "primary")}
    ts = upload(http, files, {"shape": {"rankCount": 2}})
    census = _validated(http, ts["id"])["rank_census"]
    assert census["passed"] is False

    message = error(promote(http, ts["id"]), 409)

    assert message.startswith(
        f"Traceset '{ts['id']}' fails its census: rank_census: {census['message']}"
    )
    assert message.endswith("; fix its files or metadata, or promote it as it is with force: true")
    after = stored(http, ts["id"])
    assert (after["scope"], after["expiresAt"] is not None) == ("workspace", True)
    # New metadata cannot mend a missing rank (the rank count is fixed): still refused.
    assert error(promote(http, ts["id"], {"workloadMetadata": {"shape": {"rankCount": 2}}}), 409)
    # A force that is not a JSON boolean is a malformed body.
    assert error(promote(http, ts["id"], {"force": "yes"}), 400)

    forced = promote(http, ts["id"], {"force": True})

    assert forced.status_code == 200, forced.text
    assert forced.json() == {"id": ts["id"], "scope": "tenant", "promotionApplied": True}
    assert stored(http, ts["id"])["expiresAt"] is None


def test_new_metadata_is_judged_on_the_checks_it_cannot_change(
    http: TestClient, services: Services
) -> None:
    # The real 4-rank DDP set records one group of 4: tp=2 has no group of its size.
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(DDP.iterdir())}
    wrong = {"shape": {"rankCount": 4}, "parallelism": {"dp": 2, "tp": 2}}
    ts = upload(http, files, wrong)
    checks = _validated(http, ts["id"])
    assert checks["rank_census"]["passed"] is True
    assert checks["process_groups"]["passed"] is False

    refused = error(promote(http, ts["id"]), 409)
    assert f"fails its census: process_groups: {checks['process_groups']['message']}" in refused

    # Corrected degrees: the recorded group check judged the old ones, so it does not count.
    mended = {"shape": {"rankCount": 4}, "parallelism": {"dp": 4}}
    answer = promote(http, ts["id"], {"workloadMetadata": mended})
    assert answer.status_code == 200, answer.text
    # ... and the census is taken again against the new degrees.
    services.wait_for_background()
    assert _validated(http, ts["id"])["process_groups"]["passed"] is True


def test_a_traceset_not_inspected_yet_is_promoted(http: TestClient, services: Services) -> None:
    ts = upload_ready(http, RANKS_256)
    with services.db.session() as session:
        session.execute(
            update(db.Traceset).where(db.Traceset.id == ts["id"]).values(inspection=None)
        )
    assert promote(http, ts["id"]).status_code == 200


def test_a_string_global_batch_size_is_stored_at_upload_and_refused_at_promotion(
    http: TestClient,
) -> None:
    """The seed: upload 'validates only the rank-count members' and stores descriptive
    members 'as given, whatever their spelling'; promotion reads shape.global_batch_size
    through its typed model (issue 43, item 8: the seed, not the issue, decides upload)."""
    metadata = {"shape": {"rankCount": 256, "global_batch_size": "1024"}}
    refusal = (
        'workloadMetadata.shape.global_batch_size must be a whole number of at least 1, got "1024"'
    )
    # Accepted, but said at once, in the answer (and by its dry run).
    files = [{"name": "rank_0.json", "size": 19, "role": "primary"}]
    body = {"name": "checked", "files": files, "workloadMetadata": metadata}
    checked = http.post(f"{UPLOAD_URL}/check", json=body)
    assert checked.status_code == 200, checked.text
    assert checked.json()["warnings"] == [
        f"stored as given, but promotion will refuse it: {refusal}"
    ]
    assert start_upload(http, metadata)["warnings"] == checked.json()["warnings"]
    ts = upload_ready(http, metadata)
    assert ts["workloadMetadata"] == metadata

    message = error(promote(http, ts["id"]), 422)

    # The member, and what to do: the stored metadata cannot change but by promoting with
    # corrected metadata, which is then taken.
    assert message == refusal + STORED
    corrected = {"shape": {"rankCount": 256, "global_batch_size": 1024}}
    assert promote(http, ts["id"], {"workloadMetadata": corrected}).status_code == 200
    assert stored(http, ts["id"])["workloadMetadata"] == corrected


def test_upload_url_answers_no_warning_for_metadata_promotion_takes(http: TestClient) -> None:
    assert start_upload(http, RANKS_256)["warnings"] == []
    near = {"shape": {"rankCount": 8}, "parallelism": {"DP": 8}}
    assert start_upload(http, near)["warnings"] == [
        "workloadMetadata.parallelism.DP is not read as a declaration of the rank count: did "
        "you mean `dp`?",
        "stored as given, but promotion will refuse it: workloadMetadata.parallelism must hold "
        'at least one of dp, tp, sp, ep, pp, got {"DP":8}',
    ]
