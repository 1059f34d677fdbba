"""List filters on what inspection derived: ``inspected.<fact>=value`` and the world-size range."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.envelopes import assert_error
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tests.support.world import LIST, World, add, list_all
from tracestore.server import db
from tracestore.server.inspection import record_facts


def _inspected(world: World, summary: dict[str, Any], **fields: Any) -> str:
    traceset_id = add(world, **fields)
    with world.services.db.session() as session:
        traceset = session.get(db.Traceset, traceset_id)
        assert traceset is not None
        traceset.inspection = {"status": "complete", "summary": summary}
        record_facts(session, traceset, summary)
    return traceset_id


@pytest.fixture
def inspected(world: World) -> dict[str, str]:
    h100 = {"gpuModels": ["NVIDIA H100 80GB HBM3"], "backends": ["nccl"], "worldSize": 16}
    return {
        "h100": _inspected(world, {**h100, "formats": ["kineto_json"], "ncclVersions": ["2.18.1"]}),
        "h100-et": _inspected(world, {**h100, "formats": ["kineto_json", "pytorch_et_json"]}),
        "a100": _inspected(
            world, {"gpuModels": ["NVIDIA A100-SXM4-80GB"], "backends": ["nccl"], "worldSize": 8}
        ),
        "gloo": _inspected(world, {"backends": ["gloo"], "formats": ["chakra_et"], "worldSize": 4}),
        "mixed": _inspected(
            world,
            {"gpuModels": ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe"], "worldSize": 2},
            scope="tenant",
        ),
        "plain": add(world),  # never inspected: no facts, no world size
    }


CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"inspected.gpu_model": "H100"}, {"h100", "h100-et", "mixed"}),
    ({"inspected.gpu_model": "h100"}, {"h100", "h100-et", "mixed"}),
    ({"inspected.gpu_model": "NVIDIA H100 80GB HBM3"}, {"h100", "h100-et"}),
    ({"inspected.gpu_model": "A100-SXM4-80GB"}, {"a100", "mixed"}),
    ({"inspected.gpu_model": "B200"}, set()),
    ({"inspected.backend": "NCCL"}, {"h100", "h100-et", "a100"}),
    ({"inspected.backend": "gloo"}, {"gloo"}),
    ({"inspected.format": "pytorch_et_json"}, {"h100-et"}),
    ({"inspected.format": "kineto_json", "inspected.backend": "nccl"}, {"h100", "h100-et"}),
    ({"inspected.nccl_version": "2.18.1"}, {"h100"}),
    ({"inspected.world_size": "16"}, {"h100", "h100-et"}),
    ({"minWorldSize": "5"}, {"h100", "h100-et", "a100"}),
    ({"maxWorldSize": "4"}, {"gloo", "mixed"}),
    ({"minWorldSize": "3", "maxWorldSize": "8"}, {"a100", "gloo"}),
    ({"inspected.world_size": "16", "maxWorldSize": "8"}, set()),
    ({"inspected.gpu_model": "H100", "maxWorldSize": "2"}, {"mixed"}),
    ({"inspected.gpu_model": "H100", "sort": "name:asc"}, {"h100", "h100-et", "mixed"}),
]


@pytest.mark.parametrize(
    ("params", "expected"), CASES, ids=lambda v: str(v)[:48] if isinstance(v, dict) else None
)
def test_inspected_filters_select_exactly_the_matching_tracesets(
    world: World, inspected: dict[str, str], params: dict[str, Any], expected: set[str]
) -> None:
    names = {v: k for k, v in inspected.items()}
    found = list_all(world.clients["admin"], params, limit=2)
    assert {names[item["id"]] for item in found} == expected


BAD = [
    ({"inspected.gpu": "H100"}, "Unknown inspected fact 'gpu' in 'inspected.gpu'"),
    ({"inspected.gpu_model": " "}, "inspected.gpu_model must not be empty"),
    ({"inspected.world_size": "eight"}, "inspected.world_size must be an integer"),
    ({"inspected.world_size": "0"}, "inspected.world_size must be an integer from 1"),
    ({"minWorldSize": "-1"}, "minWorldSize must be an integer"),
    ({"maxWorldSize": "1.5"}, "maxWorldSize must be an integer"),
]


@pytest.mark.parametrize(("params", "message"), BAD, ids=lambda v: str(v)[:40])
def test_bad_inspected_filters_are_400s_naming_them(
    world: World, params: dict[str, Any], message: str
) -> None:
    response = world.clients["admin"].get(LIST, params=params)
    assert message in assert_error(response, 400, "VALIDATION_ERROR")["message"]


def test_a_cursor_is_bound_to_the_inspected_filters(
    world: World, inspected: dict[str, str]
) -> None:
    client = world.clients["admin"]
    page = client.get(LIST, params={"inspected.gpu_model": "H100", "limit": 1}).json()
    cursor = page["pagination"]["nextCursor"]
    assert cursor
    other = client.get(LIST, params={"inspected.gpu_model": "A100", "limit": 1, "next": cursor})
    assert (
        "different sort or different filters"
        in assert_error(other, 400, "VALIDATION_ERROR")["message"]
    )


def test_reinspection_replaces_the_facts(world: World, inspected: dict[str, str]) -> None:
    with world.services.db.session() as session:
        traceset = session.get(db.Traceset, inspected["gloo"])
        assert traceset is not None
        record_facts(session, traceset, {"backends": ["mpi"], "worldSize": 32})
    client = world.clients["admin"]
    assert list_all(client, {"inspected.backend": "gloo"}) == []
    assert [i["id"] for i in list_all(client, {"inspected.backend": "mpi"})] == [inspected["gloo"]]
    assert [i["id"] for i in list_all(client, {"minWorldSize": 32})] == [inspected["gloo"]]


def test_an_uploaded_kineto_set_is_found_by_its_gpu_backend_and_world_size(world: World) -> None:
    directory = TESTDATA / "kineto-dlrm-8ranks"
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(directory.iterdir())}
    http = world.clients["admin"]
    ts = upload(http, files, {"shape": {"rankCount": 8}})
    summary = http.get(f"{LIST}/{ts['id']}").json()["inspection"]["summary"]
    assert summary["gpuModels"] == ["Tesla V100-SXM2-32GB"]
    assert summary["backends"] == ["nccl"] and summary["formats"] == ["kineto_json"]
    assert summary["ranksCaptured"] == 8 and summary["worldSize"] == 8
    for params in (
        {"inspected.gpu_model": "V100-SXM2-32GB"},
        {"inspected.gpu_model": "tesla v100-sxm2-32gb"},
        {"inspected.backend": "nccl", "inspected.world_size": 8},
        {"inspected.format": "kineto_json", "minWorldSize": 8, "maxWorldSize": 8},
    ):
        assert [i["id"] for i in list_all(http, params)] == [ts["id"]], params
    assert list_all(http, {"inspected.gpu_model": "H100"}) == []
