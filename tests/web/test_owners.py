"""Who uploaded a traceset and editing it, in Chromium against a real ``tracestore serve``
on SQLite and on PostgreSQL (issue 43, items 3 and 4): the uploader in the list and on the
traceset page, the list's tag filter and uploader links, and the edit form, offered to the
uploader only (``canEdit``) and recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support.replica_processes import fresh_database, postgres  # noqa: F401 - the fixture
from tests.support.seeding import get_traceset, sign_in
from tests.support.served import Served, serving
from tracestore.client import Client
from tracestore.server import auth, db
from tracestore.server.db.database import Database


def _colleague(served: Served, database_url: str | None, data_dir: Path, name: str) -> str:
    """A user of the admin's tenant and workspace, created in the served database; their
    API token."""
    database = Database(database_url or f"sqlite:///{data_dir / 'tracestore.db'}")
    try:
        with database.session() as session:
            admin_user = session.query(db.User).filter(db.User.name == "admin").one()
            now = datetime.now(UTC)
            user = auth.create_user(
                session,
                admin_user.tenant_id,
                name,
                now,
                workspace_ids=[admin_user.default_workspace_id or ""],
            )
            return auth.issue_token(session, user.id, f"{name} (test)", now).token
    finally:
        database.dispose()


def _upload(served: Served, token: str, name: str, tags: list[str], tmp_path: Path) -> str:
    notes = tmp_path / f"{name}.txt"
    notes.write_text(name)
    with Client(served.url, token) as client:
        return client.upload_traceset([], supporting=[notes], name=name, tags=tags).id


def test_the_uploader_is_shown_tags_filter_and_the_uploader_edits(
    page: Page, tmp_path: Path, database_url: str | None
) -> None:
    data_dir = tmp_path / "data"
    settings = {"TRACESTORE_TOKEN_CACHE_SECONDS": "0"}
    if database_url is not None:
        settings["TRACESTORE_DATABASE_URL"] = database_url
    with serving(data_dir, env=settings) as served:
        bob = _colleague(served, database_url, data_dir, "bob@acme.test")
        alpha = _upload(served, served.token, "alpha", ["llama"], tmp_path)
        beta = _upload(served, bob, "beta", ["llama", "baseline"], tmp_path)

        # The list: who uploaded each, a tag filter of every tag given, uploader links.
        sign_in(page, served, token=bob)
        rows = page.locator("table.tracesets tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.filter(has_text="beta").locator("td.uploader")).to_have_text("bob@acme.test")
        expect(rows.filter(has_text="alpha").locator("td.uploader")).to_have_text("admin")
        page.get_by_label("Tags (all of, comma-separated)").fill("llama, baseline")
        page.get_by_role("button", name="Apply filters").click()
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-id", beta)
        assert "tag=llama&tag=baseline" in page.url
        page.goto(f"{served.url}/")
        rows.filter(has_text="alpha").locator("td.uploader a").click()
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-id", alpha)
        assert "uploadedBy=user_" in page.url

        # Another's traceset: the uploader shown, no edit offered.
        page.goto(f"{served.url}/tracesets/{alpha}")
        head = page.locator("header.detail-head")
        expect(head).to_contain_text("Uploaded byadmin (user_")
        expect(page.locator(".actions-panel")).to_be_visible()
        expect(page.get_by_role("button", name="Edit name, description, tags…")).to_have_count(0)

        # Their own: edited, and the edit recorded.
        page.goto(f"{served.url}/tracesets/{beta}")
        page.get_by_role("button", name="Edit name, description, tags…").click()
        form = page.locator("form.edit")
        form.get_by_label("Name").fill("beta, renamed")
        form.get_by_label("Description (empty removes it)").fill("the second run")
        form.get_by_label("Tags (comma-separated)").fill("baseline, h100")
        form.get_by_role("button", name="Save").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text("beta, renamed")
        expect(head.locator(".description")).to_have_text("the second run")
        expect(head.locator(".tags .tag")).to_have_text(["baseline", "h100"])
        expect(head).to_contain_text("by bob@acme.test (user_")
        stored = get_traceset(served, beta, bob).json()
        assert (stored["name"], stored["tags"]) == ("beta, renamed", ["baseline", "h100"])
        assert stored["editedBy"]["name"] == "bob@acme.test"

        # A refusal in the API's words: a name too long for the service.
        page.get_by_role("button", name="Edit name, description, tags…").click()
        form.get_by_label("Name").evaluate("(input) => input.removeAttribute('maxlength')")
        form.get_by_label("Name").fill("n" * 256)
        form.get_by_role("button", name="Save").click()
        expect(form.locator(".edit-error")).to_contain_text("name")
        assert get_traceset(served, beta, bob).json()["name"] == "beta, renamed"
