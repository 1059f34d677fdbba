"""The signing key of presigned URLs, shared through the database: a URL signed by one
process verifies in another, a data directory's existing key is adopted, a rotation keeps the
previous key for the URL lifetime, and a signer keeps its keys while the database is away."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tracestore.errors import Forbidden
from tracestore.server.db.database import Database
from tracestore.server.presigned import UrlSigner, rotate_signing_key, signing_keys
from tracestore.server.services import url_signer
from tracestore.server.settings import Settings


def test_a_url_signed_by_one_process_verifies_in_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    database = Database(url)
    database.migrate()
    one = Settings(data_dir=tmp_path / "one", database_url=url)
    two = Settings(data_dir=tmp_path / "two", database_url=url)
    signer_one, signer_two = url_signer(one, database), url_signer(two, Database(url))
    path = signer_one.archive_path("ts_a", 4_000_000_000)
    signature = path.rsplit("signature=", 1)[1]
    signer_two.verify_archive("ts_a", 4_000_000_000, signature, _now())


def test_an_existing_data_directory_key_is_adopted_so_its_urls_stay_good(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "signing-key").write_text("the-old-key\n")
    url = f"sqlite:///{tmp_path / 'data' / 'tracestore.db'}"
    database = Database(url)
    database.migrate()
    signer = url_signer(Settings(data_dir=tmp_path / "data"), database)
    old = UrlSigner(b"the-old-key").archive_path("ts_a", 4_000_000_000)
    signer.verify_archive("ts_a", 4_000_000_000, old.rsplit("signature=", 1)[1], _now())


def test_rotation_keeps_the_previous_key_for_the_url_lifetime(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'keys.db'}")
    database.migrate()
    lifetime = timedelta(hours=1)
    now = _now()
    first = signing_keys(database, now, lifetime)
    assert len(first) == 1
    rotate_signing_key(database, now, lifetime)
    keys = signing_keys(database, now + timedelta(minutes=59), lifetime)
    assert keys[1:] == first and keys[0] != first[0]
    assert signing_keys(database, now + timedelta(minutes=61), lifetime) == keys[:1]

    # A process that read the keys before the rotation verifies the new key's URLs (it
    # rereads on a mismatch), and its own old URLs still verify after rereading.
    stale = UrlSigner(first[0], reload=lambda: signing_keys(database, now, lifetime))
    new = UrlSigner(keys[0]).archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    old = stale.archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    time.sleep(1.1)  # a mismatch rereads at most once a second
    stale.verify_archive("ts_a", 4_000_000_000, new, now)
    stale.verify_archive("ts_a", 4_000_000_000, old, now)


def test_a_signer_keeps_its_keys_when_the_database_is_away(tmp_path: Path) -> None:
    def away() -> list[bytes]:
        raise OSError("database away")

    signer = UrlSigner(b"key", reload=away)
    signature = signer.archive_path("ts_a", 4_000_000_000).rsplit("signature=", 1)[1]
    time.sleep(1.1)
    with pytest.raises(Forbidden):
        signer.verify_archive("ts_a", 4_000_000_000, "forged", _now())
    signer.verify_archive("ts_a", 4_000_000_000, signature, _now())


def _now() -> datetime:
    return datetime.now(UTC)
