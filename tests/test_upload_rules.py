"""The reference's workloadMetadata rules, through real HTTP on POST upload-url.

Every refused request must leave nothing behind: no traceset, session, file, blob or byte.
Bodies are sent as raw JSON text so ``2.0`` and ``1e3`` reach the server as written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.envelopes import assert_error
from tests.support.uploading import UPLOAD_URL, raw_post, record_counts, upload
from tracestore.metadata import MISSING_RANK_COUNT_MESSAGE
from tracestore.server.services import Services

PRIMARY = '[{"name":"traces.zip","size":1048576,"role":"primary"}]'
SUPPORTING = '[{"name":"notes.txt","size":10,"role":"supporting"}]'


def body(metadata_text: str | None, files: str = PRIMARY) -> str:
    member = "" if metadata_text is None else f',"workloadMetadata":{metadata_text}'
    return f'{{"name":"run","files":{files}{member}}}'


def refused(http: TestClient, services: Services, text: str) -> dict[str, Any]:
    before = record_counts(services)
    response = raw_post(http, UPLOAD_URL, text)
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert record_counts(services) == before, "a refused upload left something behind"
    return error


def accepted(http: TestClient, text: str) -> dict[str, Any]:
    response = raw_post(http, UPLOAD_URL, text)
    assert response.status_code == 200, response.text
    traceset = http.get(f"/api/v1/tracesets/{response.json()['tracesetId']}")
    assert traceset.status_code == 200
    return dict(traceset.json())


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        "null",
        "{}",
        '{"shape":null}',
        '{"shape":{"rank_count":8}}',
        '{"parallelism":{"cp":2,"fsdp":2}}',
        '{"parallelism":{}}',
        '{"parallelism":null}',
        '{"shape":{"rankCount":null},"parallelism":{"dp":null,"tp":null}}',
        '{"parallelism":{"DP":8}}',
        '{"workload_family":"llama"}',
    ],
)
def test_primary_files_without_a_declaration_are_refused_with_the_seed_message(
    http: TestClient, services: Services, metadata: str | None
) -> None:
    assert refused(http, services, body(metadata))["message"] == MISSING_RANK_COUNT_MESSAGE


@pytest.mark.parametrize(
    "member",
    [
        "shape.rankCount",
        "parallelism.dp",
        "parallelism.tp",
        "parallelism.sp",
        "parallelism.ep",
        "parallelism.pp",
    ],
)
@pytest.mark.parametrize("value", ["0", "-1", "2.0", '"4"', "true", "1e3", "[]", "{}"])
def test_each_rank_count_member_must_be_a_whole_number_of_at_least_1(
    http: TestClient, services: Services, member: str, value: str
) -> None:
    outer, inner = member.split(".")
    message = refused(http, services, body(f'{{"{outer}":{{"{inner}":{value}}}}}'))["message"]
    assert f"workloadMetadata.{member}" in message
    assert value in message


def test_product_mismatch_names_both_numbers(http: TestClient, services: Services) -> None:
    text = body('{"shape":{"rankCount":255},"parallelism":{"dp":32,"tp":8,"pp":1}}')
    message = refused(http, services, text)["message"]
    assert (
        "shape.rankCount 255 differs from the parallelism product 256 (dp × tp × sp × ep × pp)"
        in message
    )


@pytest.mark.parametrize(
    "metadata",
    [
        '{"shape":{"rankCount":2147483648}}',
        '{"parallelism":{"dp":65536,"tp":32768}}',
        '{"parallelism":{"dp":2147483648}}',
    ],
)
def test_rank_count_above_2147483647_is_refused(
    http: TestClient, services: Services, metadata: str
) -> None:
    message = refused(http, services, body(metadata))["message"]
    assert "2,147,483,647" in message
    assert "2147483648" in message


@pytest.mark.parametrize(
    "metadata",
    [
        '{"shape":{"rankCount":2147483647}}',
        '{"parallelism":{"dp":65536,"tp":32767}}',
    ],
)
def test_rank_count_of_exactly_2147483647_is_accepted(http: TestClient, metadata: str) -> None:
    expected = 2147483647 if "rankCount" in metadata else 65536 * 32767
    assert accepted(http, body(metadata))["rankCountDerived"] == expected


@pytest.mark.parametrize(
    "metadata,member",
    [
        ("[1,2]", "workloadMetadata"),
        ('"llama"', "workloadMetadata"),
        ("42", "workloadMetadata"),
        ("true", "workloadMetadata"),
        ('{"shape":[256]}', "workloadMetadata.shape"),
        ('{"shape":"256"}', "workloadMetadata.shape"),
        ('{"parallelism":8}', "workloadMetadata.parallelism"),
        ('{"parallelism":false}', "workloadMetadata.parallelism"),
    ],
)
def test_metadata_shape_and_parallelism_must_be_objects_or_null(
    http: TestClient, services: Services, metadata: str, member: str
) -> None:
    message = refused(http, services, body(metadata))["message"]
    assert message.startswith(f"{member} must be an object or null")


def _sized_metadata(size: int) -> str:
    base = '{"shape":{"rankCount":8},"notes":""}'
    padding = size - len(base.encode())
    # A mix of one-, two- and three-byte characters, counted as UTF-8 bytes.
    text = "é漢" * (padding // 5) + "a" * (padding % 5)
    value = json.dumps(
        {"shape": {"rankCount": 8}, "notes": text}, separators=(",", ":"), ensure_ascii=False
    )
    assert len(value.encode()) == size
    return value


def test_metadata_of_65536_bytes_is_accepted_and_65537_refused(
    http: TestClient, services: Services
) -> None:
    stored = accepted(http, body(_sized_metadata(65_536)))
    assert stored["workloadMetadata"] == json.loads(_sized_metadata(65_536))
    message = refused(http, services, body(_sized_metadata(65_537)))["message"]
    assert "65,537 bytes" in message and "larger than 65,536 bytes" in message


def test_supporting_only_uploads_need_no_declaration(http: TestClient) -> None:
    assert accepted(http, body(None, SUPPORTING))["rankCountDerived"] is None
    assert accepted(http, body('{"precision":"bf16"}', SUPPORTING))["rankCountDerived"] is None


def test_supporting_only_uploads_still_check_what_they_declare(
    http: TestClient, services: Services
) -> None:
    message = refused(http, services, body('{"parallelism":{"tp":"8"}}', SUPPORTING))["message"]
    assert (
        message == 'workloadMetadata.parallelism.tp must be a whole number of at least 1, got "8"'
    )


def test_null_degrees_count_as_absent(http: TestClient) -> None:
    text = body('{"parallelism":{"dp":4,"tp":null,"sp":null,"ep":null,"pp":2}}')
    assert accepted(http, text)["rankCountDerived"] == 8


@pytest.mark.parametrize(
    "metadata",
    [
        '{"parallelism":{"dp":32,"tp":8,"pp":1},"shape":{"rankCount":256}}',
        '{"parallelism":{"dp":32,"tp":8,"pp":1}}',
        '{"shape":{"rankCount":256}}',
    ],
)
def test_the_seed_256_rank_example(http: TestClient, metadata: str) -> None:
    assert accepted(http, body(metadata))["rankCountDerived"] == 256


def test_cp_and_fsdp_are_neither_factors_nor_checked_at_upload(http: TestClient) -> None:
    text = body('{"parallelism":{"dp":8,"cp":2.5,"fsdp":3}}')
    assert accepted(http, text)["rankCountDerived"] == 8


def test_metadata_is_stored_and_returned_exactly_as_given(http: TestClient) -> None:
    metadata = (
        '{"workload_family":"llama","shape":{"rankCount":16,"global_batch_size":1024,'
        '"rank_count":16},"parallelism":{"tp":8,"dp":2,"cp":2.0,"DP":1},'
        '"lr":1e-4,"big":1e400,"exact":0.1000000000000000055511151231257827,'
        '"z":{"b":1,"a":[true,null,"é"]},"workloadFamily":"ignored"}'
    )
    response = raw_post(http, UPLOAD_URL, body(metadata))
    assert response.status_code == 200, response.text
    got = http.get(f"/api/v1/tracesets/{response.json()['tracesetId']}")
    text = got.text
    start = text.index('"workloadMetadata":') + len('"workloadMetadata":')
    returned, _ = json.JSONDecoder().raw_decode(text, start)
    assert returned["lr"] == 1e-4
    assert metadata in text, "key order and numbers as written must survive the round trip"


def test_the_size_limit_reads_numbers_as_python_json_does(
    http: TestClient, services: Services
) -> None:
    # 1e3 serialises as 1000.0 in the size rule's json.dumps: two bytes longer.
    base = _sized_metadata(65_534)
    assert base.endswith('"}')
    text = base[:-1] + ',"n":1e3}'
    size_as_spec = len(
        json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert size_as_spec > 65_536
    assert "larger than 65,536 bytes" in refused(http, services, body(text))["message"]


def test_a_refused_declaration_in_a_complete_flow_leaves_no_trace(
    http: TestClient, services: Services
) -> None:
    traceset = upload(http, {"rank0.json": (b"{}", "primary")}, {"shape": {"rankCount": 1}})
    before = record_counts(services)
    refused(http, services, body('{"shape":{"rankCount":0}}'))
    assert record_counts(services) == before
    assert http.get(f"/api/v1/tracesets/{traceset['id']}").json()["status"] == "ready"
