"""A served process's startup heap is frozen out of the cyclic collector's sight
(``heap.freeze_startup_heap``); an app handed its services (the tests') leaves the heap be."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tracestore.server.app import create_app
from tracestore.server.services import Services
from tracestore.server.settings import Settings


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # what the served app froze is this test process's: hand it back


def test_a_served_app_freezes_its_startup_heap(settings: Settings, unfrozen: None) -> None:
    with TestClient(create_app(settings)) as http:
        assert http.get("/healthz").status_code == 200
        assert gc.get_freeze_count() > 0


def test_an_app_given_its_services_leaves_the_heap_alone(
    services: Services, unfrozen: None
) -> None:
    with TestClient(create_app(services=services)) as http:
        assert http.get("/healthz").status_code == 200
        assert gc.get_freeze_count() == 0
