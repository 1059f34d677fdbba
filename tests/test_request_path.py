"""The request path (issue 16): a request's token check and its use case run in one worker
thread on one read session (``deps.Caller``, ``Database.shared_reads``), and a short read
on SQLite on the event loop's own thread (``Caller.read``); the pool keeps a connection per
request thread, and the served sockets send without waiting on delayed ACKs (the access
log's batching is tests/test_accesslog.py's). How fast it is, is bench/load.py's business;
these pin what it must keep true."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select

from tests.support.paths import TESTDATA
from tests.support.uploading import UPLOAD_URL, complete, put_parts, request_upload, upload
from tracestore import jsontext, schemas
from tracestore.cli.serve import _listen
from tracestore.inspect.census import census_verdict
from tracestore.server import admin, db
from tracestore.server.auth import Principal, TokenCache, create_tenant
from tracestore.server.deps import Caller
from tracestore.server.ids import new_request_id
from tracestore.server.listing import pages
from tracestore.server.listing.query import parse_list_query
from tracestore.server.services import Services, build_services


def _count(engine: Any, name: str) -> list[int]:
    counter = [0]

    def bump(*_: Any) -> None:
        counter[0] += 1

    event.listen(engine, name, bump)
    return counter


def _tenants(services: Services) -> int:
    with services.db.session(write=False) as session:
        return int(session.scalar(select(func.count()).select_from(db.Tenant)) or 0)


def test_a_request_checks_its_token_and_runs_its_use_case_on_one_connection(
    services: Services, admin_token: str
) -> None:
    checkouts = _count(services.db.read_engine, "checkout")
    query = parse_list_query([("limit", "5")])
    page = asyncio.run(Caller(services, admin_token).run(pages.page_text, query))
    assert json.loads(page)["items"] == []
    assert checkouts[0] == 1  # the token's check and the listing: one session, not two


def test_the_handed_over_session_ends_with_the_use_cases_first_read(services: Services) -> None:
    checkins = _count(services.db.read_engine, "checkin")
    with services.db.shared_reads():
        _tenants(services)  # the token's check
        assert checkins[0] == 0  # kept open for the use case
        _tenants(services)  # the use case's first read: ends it
        assert checkins[0] == 1
        _tenants(services)  # later reads are sessions of their own, as before
        assert checkins[0] == 2


def _thread_of_read(services: Services, token: str) -> threading.Thread:
    def where(services: Services, principal: Principal) -> threading.Thread:
        assert principal.is_tenant_admin  # the token was checked
        return threading.current_thread()

    return asyncio.run(Caller(services, token).read(where))


def test_a_short_read_runs_on_the_event_loops_thread_on_sqlite_only(
    services: Services, admin_token: str
) -> None:
    """A worker thread gives the GIL up at every statement and waits for the loop to give
    it back: on SQLite (readers never wait) the read needs none. A server database's round
    trips must not stall the loop: there it keeps to a worker thread."""
    checkouts = _count(services.db.read_engine, "checkout")
    ran_on = _thread_of_read(services, admin_token)
    if services.db.dialect == "sqlite":
        assert ran_on is threading.current_thread()
    else:
        assert ran_on is not threading.current_thread()
    assert checkouts[0] == 1  # the token's check and the read: one session either way


def test_the_served_sockets_send_without_waiting_for_delayed_acks() -> None:
    """asyncio sets TCP_NODELAY on a connection only when its socket says it is TCP; the
    listener ``serve`` binds must, or every answer waits ~40 ms on the client's ACK."""
    listener = _listen("127.0.0.1", 0)
    flags: list[int] = []

    async def main() -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            flags.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        while not flags:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert flags and flags[0] != 0


def test_reads_after_a_write_in_the_same_request_see_it(services: Services) -> None:
    with services.db.shared_reads():
        before = _tenants(services)
        with services.db.session() as session:
            create_tenant(session, "written-mid-request", services.now())
        assert _tenants(services) == before + 1


def test_a_failed_read_leaves_the_next_one_a_fresh_session(services: Services) -> None:
    with services.db.shared_reads():
        try:
            with services.db.session(write=False) as session:
                session.execute(select(db.Tenant.id).where(db.Tenant.id == "x"))
                raise LookupError("the use case gave up")
        except LookupError:
            pass
        assert _tenants(services) >= 1


def test_a_bad_token_is_refused_before_the_query_is_judged(http: TestClient) -> None:
    for path in ("/api/v1/tracesets?limit=0&sort=nonsense", "/api/v1/libraries?limit=0"):
        answer = http.get(path, headers={"Authorization": "Bearer wrong"})
        assert answer.status_code == 401, answer.text
        assert http.get(path).status_code == 400  # the admin's own token: the query's fault


def test_a_bad_token_is_refused_before_the_host_is_judged(http: TestClient) -> None:
    body = b'{"name": "x", "files": [{"name": "a.bin", "size": 1}]}'
    for token, status in (("wrong", 401), (None, 400)):
        headers = {"Host": "not a host!", "Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        answer = http.post(UPLOAD_URL, headers=headers, content=body)
        assert answer.status_code == status, answer.text


def test_the_pool_keeps_a_connection_for_each_request_thread(services: Services) -> None:
    # More than SQLAlchemy's default pool keeps (5; its 10 overflow are closed on return).
    threads = 12
    connects = _count(services.db.read_engine, "connect")
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def read() -> None:
        try:
            with services.db.session(write=False) as session:
                session.execute(select(db.Tenant.id)).all()
                barrier.wait(timeout=30)  # all at once: 12 connections checked out together
        except BaseException as exc:
            failures.append(exc)

    def burst() -> None:
        workers = [threading.Thread(target=read) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    burst()
    opened = connects[0]
    burst()
    assert not failures
    assert connects[0] == opened  # the second burst opened none


def test_request_ids_are_unique() -> None:
    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000


# ---- the token cache (auth.TokenCache, TRACESTORE_TOKEN_CACHE_SECONDS) ----


def _new_token(services: Services) -> tuple[str, str]:
    issued = admin.create_token(services, name="cached")
    return issued.token, issued.id


def _lists(http: TestClient, token: str) -> int:
    answer = http.get("/api/v1/tracesets", headers={"Authorization": f"Bearer {token}"})
    return int(answer.status_code)


def test_a_checked_token_is_believed_without_a_lookup_within_the_window(
    services: Services,
) -> None:
    services.token_cache = TokenCache(60)
    token, _ = _new_token(services)
    checkouts = _count(services.db.read_engine, "checkout")

    def nothing(services: Services, principal: Principal) -> str:
        return principal.user_id

    first = asyncio.run(Caller(services, token).read(nothing))
    assert checkouts[0] == 1  # the token's lookup
    assert asyncio.run(Caller(services, token).read(nothing)) == first
    assert checkouts[0] == 1  # none: the cache answered


def test_a_token_revoked_or_a_user_disabled_in_this_process_is_refused_at_once(
    http: TestClient, services: Services
) -> None:
    services.token_cache = TokenCache(60)
    token, token_id = _new_token(services)
    assert _lists(http, token) == 200
    admin.revoke_token(services, token_id)
    assert _lists(http, token) == 401

    admin.create_user(services, "carol")
    carols = admin.create_token(services, user="carol", name="c")
    assert _lists(http, carols.token) == 200
    admin.disable_user(services, "carol")
    assert _lists(http, carols.token) == 401


def test_a_token_revoked_by_another_process_is_refused_once_the_window_passes(
    http: TestClient, services: Services
) -> None:
    """The documented bound: the admin commands run in a process of their own; what they
    revoke reaches a serving process within TRACESTORE_TOKEN_CACHE_SECONDS."""
    now = [1000.0]  # the cache's own clock: a slow machine must not age the entry early
    services.token_cache = TokenCache(0.5, monotonic=lambda: now[0])
    token, token_id = _new_token(services)
    assert _lists(http, token) == 200
    elsewhere = build_services(services.settings, clock=services.clock)  # another process's
    try:
        admin.revoke_token(elsewhere, token_id)
    finally:
        elsewhere.close()
    now[0] += 0.4
    assert _lists(http, token) == 200  # still believed, for at most the window
    now[0] += 0.2
    assert _lists(http, token) == 401


def test_a_window_of_zero_looks_every_token_up(http: TestClient, services: Services) -> None:
    services.token_cache = TokenCache(0)
    token, token_id = _new_token(services)
    assert _lists(http, token) == 200
    elsewhere = build_services(services.settings, clock=services.clock)
    try:
        admin.revoke_token(elsewhere, token_id)
    finally:
        elsewhere.close()
    assert _lists(http, token) == 401


# ---- the GET's answer, written straight from its rows (tracesets.answer_text) ----


def _file_model(file: db.TracesetFile, primaries: int, rank_count: int | None) -> Any:
    """A file as the API's rules have it: a primary file's rank range is every declared
    rank when it is the only primary file, else what inspection found; its provenance is
    a primary file's only."""
    ranks = None
    if file.role == "primary":
        if primaries == 1 and rank_count is not None:
            ranks = {"start": 0, "end": rank_count - 1}
        elif file.rank_start is not None and file.rank_end is not None:
            ranks = {"start": file.rank_start, "end": file.rank_end}
    told = file.rank_provenance if file.role == "primary" else None
    return schemas.FileResponse(
        name=file.name,
        size=file.size,
        role=file.role,  # type: ignore[arg-type]
        content_type=file.content_type,
        hash=f"sha256:{file.sha256}" if file.sha256 else None,
        metadata_status=file.metadata_status,  # type: ignore[arg-type]
        rank_range=None if ranks is None else schemas.RankRange(**ranks),
        rank_provenance=told if isinstance(told, str) else None,
    )


def _as_the_models_write_it(services: Services, traceset_id: str) -> Any:
    """The oracle of the GET's answer: the traceset's ORM rows as ``schemas.Traceset``,
    written by ``schemas.wire_json`` (its workloadMetadata as the exact text stored)."""
    with services.db.session(write=False) as session:
        row = session.get(db.Traceset, traceset_id)
        assert row is not None
        files = list(
            session.scalars(
                select(db.TracesetFile)
                .where(db.TracesetFile.traceset_id == row.id)
                .order_by(db.TracesetFile.position)
            )
        )
        primaries = sum(1 for f in files if f.role == "primary")

        def user(user_id: str) -> schemas.UserRef:
            found = session.get(db.User, user_id)
            assert found is not None
            return schemas.UserRef(id=found.id, name=found.name)

        # The verdict judged afresh from the stored census, not read from its facts.
        inspection = row.inspection if isinstance(row.inspection, dict) else {}
        verdict, missing = (
            census_verdict(inspection["census"])
            if inspection.get("status") == "complete"
            else ("unknown", None)
        )
        view = schemas.Traceset(
            id=row.id,
            name=row.name,
            description=row.description,
            tags=list(row.tags or []),
            status=row.status,  # type: ignore[arg-type]
            scope=row.scope,  # type: ignore[arg-type]
            workspace_id=row.workspace_id,
            created_by=user(row.created_by),
            created_at=row.created_at,
            updated_at=row.updated_at,
            edited_at=row.edited_at,
            edited_by=None if row.edited_by is None else user(row.edited_by),
            can_edit=True,  # the bootstrap admin uploaded it
            expires_at=row.expires_at,
            ttl_days=row.ttl_days,
            rank_count_derived=row.rank_count,
            total_size=row.total_size,
            file_count=row.file_count,
            hash=row.hash,
            census=verdict,  # type: ignore[arg-type]
            missing_ranks=missing,
            workload_metadata=(
                None if row.metadata_text is None else jsontext.RawJSON(row.metadata_text)
            ),
            files=[_file_model(f, primaries, row.rank_count) for f in files],
            inspection=row.inspection,
        )
        return json.loads(schemas.wire_json(view))


@pytest.mark.parametrize(
    "case", ["kineto ranks", "execution traces", "one primary file", "supporting only", "edited"]
)
def test_the_gets_answer_is_what_the_models_write(
    http: TestClient, services: Services, case: str
) -> None:
    """The GET skips the models; every member must still be what they would write: the
    rank ranges and provenance, the inspection, the metadata's exact text (a NUL, a
    big integer), timestamps, tags."""
    kineto = TESTDATA / "kineto-dlrm-8ranks"
    et = TESTDATA / "pytorch-et-resnet50-ddp-2ranks"
    files, metadata = {
        "kineto ranks": (
            {p.name: (p.read_bytes(), "primary") for p in sorted(kineto.iterdir())},
            {"shape": {"rankCount": 8}},
        ),
        "execution traces": (
            {p.name: (p.read_bytes(), "primary") for p in sorted(et.iterdir())},
            {"shape": {"rankCount": 2}},
        ),
        "one primary file": (
            {"all.bin": (b"opaque", "primary"), "notes.txt": (b"n", "supporting")},
            {"shape": {"rankCount": 4}, "lr": 0.1, "big": 2**70, "note": "a\u0000b"},
        ),
        "supporting only": ({"a.bin": (b"x" * 10, "supporting")}, None),
        "edited": ({"a.bin": (b"x" * 10, "supporting")}, None),
    }[case]
    done = upload(http, files, metadata, description="déjà vu", tags=["t1", "ü"])
    services.wait_for_background()
    if case == "edited":  # editedAt and editedBy set, the tags replaced
        edit = {"name": "renamed", "description": None, "tags": ["ö", "t2"]}
        assert http.patch(f"/api/v1/tracesets/{done['id']}", json=edit).status_code == 200
    answer = http.get(f"/api/v1/tracesets/{done['id']}")
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.text) == _as_the_models_write_it(services, done["id"])
    assert list(json.loads(answer.text)) == list(_as_the_models_write_it(services, done["id"]))


def test_a_completions_answer_is_the_gets(http: TestClient, services: Services) -> None:
    """The completion answers the traceset as the GET writes it (tracesets.traceset_text),
    the first time (201) and on a retry (200); so it is also what the models would write."""
    kineto = TESTDATA / "kineto-dlrm-8ranks"
    files = {p.name: (p.read_bytes(), "primary") for p in sorted(kineto.iterdir())}
    files["notes.txt"] = (b"n", "supporting")
    metadata = {"shape": {"rankCount": 8}, "lr": 0.1, "big": 2**70, "note": "a\u0000b"}
    started = request_upload(http, files, metadata, tags=["t1", "ü"])
    assert started.status_code == 200, started.text
    upload_id = started.json()["uploadId"]
    etags = put_parts(http, started.json(), files)
    first = complete(http, upload_id, etags)
    again = complete(http, upload_id, etags)
    assert (first.status_code, again.status_code) == (201, 200)
    got = http.get(f"/api/v1/tracesets/{first.json()['id']}")
    assert first.text == again.text == got.text
    assert first.headers["content-type"] == got.headers["content-type"] == "application/json"
    assert json.loads(first.text) == _as_the_models_write_it(services, first.json()["id"])


def test_the_list_pages_text_is_what_its_model_reads_and_writes(
    http: TestClient, services: Services
) -> None:
    """The list route writes its page straight from the rows (pages.page_text): read into
    the page model and written back, nothing may change (a member misnamed, missing, extra
    or formatted otherwise would)."""
    for family, metadata in [
        ("llama", {"shape": {"rankCount": 1}, "workload_family": "llama", "workload_name": "ü"}),
        ("odd", {"shape": {"rankCount": 1}, "workload_family": 7, "workload_name": {"a": [1]}}),
        (None, None),
    ]:
        upload(http, {"a.bin": (b"x" * 10, "supporting")}, metadata, name=f"set {family}")
    for params in ({"limit": "2"}, {"workload_family": "llama"}, {"search": "set"}):
        answer = http.get("/api/v1/tracesets", params=params)
        assert answer.status_code == 200, answer.text
        page = schemas.TracesetPage.model_validate_json(answer.text)
        assert json.loads(page.model_dump_json(by_alias=True)) == answer.json()
        assert page.items, params
    first = http.get("/api/v1/tracesets", params={"limit": "2"}).json()
    assert first["pagination"]["hasMore"] is True and first["pagination"]["nextCursor"]


def test_a_list_page_writes_a_members_number_as_json_writes_it(http: TestClient) -> None:
    """The page is written by pydantic-core's serializer (jsontext.compact) unless a workload
    member is not a string: a float's text would change there (1e-07 -> 1e-7)."""
    metadata = {"shape": {"rankCount": 1}, "workload_family": 1e-7, "workload_name": 2.5e300}
    upload(http, {"a.bin": (b"x", "supporting")}, metadata, name="numbers")
    upload(http, {"a.bin": (b"y", "supporting")}, {"workload_family": "é"}, name="text")
    for params in ({"limit": "5"}, {"limit": "1"}):
        answer = http.get("/api/v1/tracesets", params=params)
        assert answer.status_code == 200, answer.text
        assert answer.text == json.dumps(answer.json(), ensure_ascii=False, separators=(",", ":"))
    assert '"workload_family":1e-07' in http.get("/api/v1/tracesets").text


def test_the_upload_url_answer_is_what_fastapi_would_write_from_its_model(
    http: TestClient,
) -> None:
    """The route answers the model's JSON as pydantic writes it, where FastAPI wrote the
    returned model itself: the same bytes as its JSON-ready data written compactly."""
    body = {
        "name": "dé jà",
        "description": "ü",
        "files": [{"name": f"rank_{n}.json", "size": 10 + n, "role": "primary"} for n in range(3)]
        + [{"name": "notes.txt", "size": 0, "role": "supporting"}],
        "workloadMetadata": {"shape": {"rankCount": 3}},
    }
    answer = http.post(UPLOAD_URL, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    model = schemas.UploadUrlResponse.model_validate_json(answer.content)
    written = json.dumps(
        model.model_dump(mode="json", by_alias=True),
        ensure_ascii=False,
        allow_nan=False,
        separators=(",", ":"),
    )
    assert answer.content == written.encode()
