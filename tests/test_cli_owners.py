"""The uploader and edits on the command line and in the Python client: ``ls
--uploaded-by/--tag`` and its UPLOADER column, ``show``'s uploader and edit record,
``tracestore edit``; ``Client.edit_traceset`` and the list's ``uploaded_by``/``tags``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.tenancy import person
from tracestore import schemas
from tracestore.cli.output import list_rows, traceset_text
from tracestore.client import Client
from tracestore.errors import Forbidden, ValidationError
from tracestore.server.services import Services


def _upload(run: Any, tmp_path: Path, name: str, *extra: str, token: str) -> str:
    path = tmp_path / f"{name}.txt"
    path.write_text(name)
    result = run(
        "upload", str(path), "--role", "supporting", "--name", name, "--json", *extra, token=token
    )
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["id"])


def test_ls_shows_and_filters_by_uploader_and_tag_and_edit_changes_them(
    run: Any, services: Services, tmp_path: Path, clock: FakeClock
) -> None:
    alice = person(services, "alice@acme.test", "default", ["default"])
    bob = person(services, "bob@acme.test", "default", ["default"])
    first = _upload(run, tmp_path, "first", "--tag", "llama", token=alice.token)
    clock.advance(seconds=1)
    second = _upload(run, tmp_path, "second", "--tag", "llama", "--tag", "big", token=bob.token)

    human = run("ls", token=bob.token)
    assert human.exit_code == 0, human.output
    header, *rows = human.stdout.splitlines()
    assert "UPLOADER" in header.split()
    assert "bob@acme.test" in rows[0] and "alice@acme.test" in rows[1]

    def ids(*args: str, token: str = bob.token) -> list[str]:
        result = run("ls", "--json", *args, token=token)
        assert result.exit_code == 0, result.output
        return [item["id"] for item in json.loads(result.stdout)]

    assert ids("--uploaded-by", "me") == [second]
    assert ids("--uploaded-by", alice.user_id) == [first]
    assert ids("--tag", "llama") == [second, first]
    assert ids("--tag", "llama", "--tag", "big") == [second]
    assert ids("--tag", "big", "--uploaded-by", alice.user_id) == []

    shown = run("show", first, token=bob.token)
    assert f"uploaded by: alice@acme.test ({alice.user_id})" in shown.stdout
    assert "edited:" not in shown.stdout

    # Bob may see alice's traceset but not edit it: one line saying whom to ask, exit 1.
    refused = run("edit", first, "--name", "mine", token=bob.token)
    assert refused.exit_code == 1, refused.output
    assert "alice@acme.test" in refused.stderr and "Traceback" not in refused.output

    edited = run(
        "edit", first, "--name", "renamed", "--tag", "big", "--untag", "llama", token=alice.token
    )
    assert edited.exit_code == 0, edited.output
    assert "name:        renamed" in edited.stdout
    assert f"by alice@acme.test ({alice.user_id})" in edited.stdout
    assert ids("--tag", "big") == [second, first]
    assert ids("--tag", "llama") == [second]
    cleared = run("edit", first, "--clear-tags", "--no-description", "--json", token=alice.token)
    assert json.loads(cleared.stdout)["tags"] == []

    nothing = run("edit", first, token=alice.token)
    assert nothing.exit_code == 2 and "Nothing to change" in nothing.stderr
    too_long = run("edit", first, "--name", "n" * 256, token=alice.token)
    assert too_long.exit_code == 1 and "name" in too_long.stderr


def test_the_client_edits_and_filters(
    app_http: TestClient, admin_token: str, services: Services
) -> None:
    client = Client("http://testserver", admin_token, http=app_http)
    other = person(services, "carol@acme.test", "default", ["default"])
    theirs = Client("http://testserver", other.token, http=app_http)
    done = client.upload_traceset([], supporting=[Path(__file__)], name="mine", tags=["a", "b"])
    uploader = done.created_by
    assert uploader is not None and uploader.name == "admin" and done.edited_by is None

    edited = client.edit_traceset(done.id, description="now", add_tags=["c"], remove_tags=["a"])
    assert (edited.description, edited.tags) == ("now", ["b", "c"])
    assert edited.edited_by is not None and edited.edited_by.id == uploader.id
    assert client.edit_traceset(done.id, description=None).description is None
    assert client.edit_traceset(done.id, name="kept").name == "kept"
    with pytest.raises(ValidationError, match="Nothing to change"):
        client.edit_traceset(done.id)
    with pytest.raises(Forbidden):
        theirs.edit_traceset(done.id, name="theirs")

    mine = [item.id for item in client.list_tracesets(uploaded_by="me")]
    assert mine == [done.id]
    assert [i.id for i in theirs.list_tracesets(uploaded_by=uploader.id)] == [done.id]
    assert [i.id for i in theirs.list_tracesets(uploaded_by="me")] == []
    assert [i.id for i in client.list_tracesets(tags=["b", "c"])] == [done.id]
    assert [i.id for i in client.list_tracesets(tags="a")] == []
    item = next(client.list_tracesets())
    assert item.created_by == uploader


def test_a_client_reads_a_service_that_does_not_say_who_uploaded(
    app_http: TestClient, admin_token: str, tmp_path: Path, run: Any
) -> None:
    """A service older than createdBy answers without it: the client's models still read
    its tracesets and list items, and the command line shows "-"."""
    _upload(run, tmp_path, "old", token=admin_token)
    page = app_http.get("/api/v1/tracesets", headers={"Authorization": f"Bearer {admin_token}"})
    item = page.json()["items"][0]
    got = app_http.get(f"/api/v1/tracesets/{item['id']}", headers=page.request.headers).json()
    for answer in (item, got):
        del answer["createdBy"]
    assert schemas.TracesetListItem.model_validate(item).created_by is None
    old = schemas.Traceset.model_validate(got)
    assert old.created_by is None
    assert "uploaded by: -" in traceset_text(old)
    assert (
        list_rows([schemas.TracesetListItem.model_validate(item)]).splitlines()[1].split()[-2]
        == "-"
    )
