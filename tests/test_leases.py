"""Leases (``db.leases``): the conditional updates a completion and a job are held by.
A completion's lease is taken once, taken over only after it lapsed, and the holder who
lost it can neither renew nor end it (the jobs' side is tests/test_jobs.py)."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.support.clock import FakeClock
from tests.support.uploading import request_upload
from tracestore.server import completion, db
from tracestore.server.db import leases
from tracestore.server.services import Services


def _held_by(services: Services, upload_id: str) -> tuple[str, str | None]:
    with services.db.session(write=False) as session:
        row = session.execute(
            select(db.UploadSession.state, db.UploadSession.lease_owner).where(
                db.UploadSession.id == upload_id
            )
        ).one()
        return row[0], row[1]


def test_a_completions_lease_is_taken_once_and_over_only_when_it_lapsed(
    services: Services, http: TestClient, clock: FakeClock
) -> None:
    upload_id = request_upload(http, {"a.bin": (b"0123456789", "supporting")}).json()["uploadId"]
    assert completion._take_lease(services, upload_id, "first")
    assert not completion._take_lease(services, upload_id, "second")
    assert _held_by(services, upload_id) == ("completing", "first")

    lease = services.settings.completion_lease
    clock.advance(seconds=lease.total_seconds() / 2)
    first = leases.held(db.UploadSession, upload_id, "first")
    assert leases.renew(services.db, db.UploadSession, first, clock() + lease)
    clock.advance(seconds=lease.total_seconds() * 0.9)  # within the renewed lease
    assert not completion._take_lease(services, upload_id, "second")

    clock.advance(seconds=lease.total_seconds())  # lapsed: its completer died
    assert completion._take_lease(services, upload_id, "second")
    assert _held_by(services, upload_id) == ("completing", "second")
    # The first holder lost it: its renewal and its release change nothing.
    assert not leases.renew(services.db, db.UploadSession, first, clock() + lease)
    completion._release_lease(services, upload_id, "first")
    assert _held_by(services, upload_id) == ("completing", "second")
    completion._release_lease(services, upload_id, "second")
    assert _held_by(services, upload_id) == ("open", None)


def test_a_renewal_renews_at_its_beat_only_while_the_lease_is_held(
    services: Services, http: TestClient, clock: FakeClock
) -> None:
    upload_id = request_upload(http, {"a.bin": (b"0123456789", "supporting")}).json()["uploadId"]
    assert completion._take_lease(services, upload_id, "first")
    lease = timedelta(minutes=10)
    renewal = leases.Renewal(
        services.db,
        db.UploadSession,
        leases.held(db.UploadSession, upload_id, "first"),
        lease,
        clock,
        every=timedelta(0),
    )

    def until() -> object:
        with services.db.session(write=False) as session:
            return session.scalar(
                select(db.UploadSession.lease_until).where(db.UploadSession.id == upload_id)
            )

    clock.advance(minutes=1)
    renewal.beat()
    assert until() == clock() + lease
    completion._release_lease(services, upload_id, "first")
    clock.advance(minutes=1)
    renewal.beat()
    assert until() is None
