"""The request path's short reads on SQLite (``reads.Reads``, ``Database.read_connection``):
a select compiled once and run on the DBAPI cursor answers what SQLAlchemy's execution
answers, value for value and type for type; the reads of one block see one snapshot; the
connection goes back to the pool with no transaction open, whatever the block did."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Integer, TypeDecorator, bindparam, event, func, literal_column, select
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.sql import Select

from tests.support.uploading import upload
from tracestore.schemas import format_timestamp
from tracestore.server import db, receiving, tracesets
from tracestore.server.auth import Principal, create_tenant
from tracestore.server.db import prepared as reads
from tracestore.server.db.prepared import Prepared, PreparedCache
from tracestore.server.deps import Caller
from tracestore.server.listing import pages as listing
from tracestore.server.listing import plan, sql
from tracestore.server.listing.query import parse_list_query
from tracestore.server.services import Services

T = db.Traceset.__table__


@pytest.fixture
def sqlite_only(services: Services) -> None:
    if services.db.dialect != "sqlite":
        pytest.skip("the raw read path is SQLite's; a server database keeps Connection.execute")


@pytest.fixture
def stored(http: TestClient) -> dict[str, Any]:
    """Two tracesets, one with workload metadata and one without."""
    files = {f"rank_{r}.json": (b'{"traceEvents": []}', "primary") for r in range(2)}
    upload(http, {"notes.txt": (b"hello", "supporting")}, name="plain")
    return upload(
        http, files, {"shape": {"rankCount": 2}, "workload_family": "gpt"}, tags=["a", "b"]
    )


def _principal(services: Services, token: str) -> Principal:
    return Caller(services, token).principal()


def _cases(services: Services, principal: Principal, traceset_id: str) -> list[Any]:
    """(statement, parameters) of every kind the request path runs: the GET's two, a part
    PUT's join, list pages of several shapes (literal binds, an expanding ``IN``, datetime
    binds, JSON members, a cursor), and the result types at their
    edges (NULL, JSON, timestamps)."""
    with services.db.session(write=False) as session:
        # Bound as the column's processor writes it, a timestamp equal to one stored compares
        # equal; as the driver's default adapter writes it (no ".000000", "+00:00"), not.
        created = session.scalar(select(T.c.created_at).where(T.c.id == traceset_id))
    cases: list[Any] = [
        (tracesets._view_columns("sqlite"), {"traceset_id": traceset_id}),
        (tracesets._VIEW_FILES, {"traceset_id": traceset_id}),
        (tracesets._view_columns("sqlite"), {"traceset_id": "ts_none"}),
        (receiving._PART_QUERY, {"upload": "up_none", "position": 0}),
        (
            select(T.c.id, T.c.tags, T.c.workload_metadata, T.c.expires_at, T.c.created_at)
            .where(T.c.created_at == bindparam("since"), T.c.status != "deleted")
            .order_by(T.c.id),
            {"since": created},
        ),
        (
            select(T.c.id).where(
                T.c.id.in_(bindparam("ids", expanding=True)), T.c.created_at <= bindparam("until")
            ),
            {"ids": [traceset_id, "ts_none"], "until": created},
        ),
    ]
    queries = [
        [("limit", "1")],
        [("limit", "5"), ("workload_family", "gpt")],
        [("limit", "5"), ("search", "PLAIN")],
        [("limit", "5"), ("sort", "size:desc,name"), ("createdAfter", "2000-01-01T00:00:00Z")],
    ]
    for parameters in queries:
        shape, values = plan.plan(principal, parse_list_query(parameters), "sqlite", after=None)
        cases.append((sql.statement(shape), values))
    query = parse_list_query([("limit", "5")])
    after = datetime.now(UTC) + timedelta(days=1)
    shape, values = plan.plan(principal, query, "sqlite", after=[after, "ts_~"])
    cases.append((sql.statement(shape), values))
    return cases


def test_a_prepared_select_answers_what_sqlalchemys_execution_answers(
    sqlite_only: None, services: Services, admin_token: str, stored: dict[str, Any]
) -> None:
    principal = _principal(services, admin_token)
    dialect = services.db.read_engine.dialect
    with services.db.read_engine.connect() as connection:
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        seen = 0
        for statement, values in _cases(services, principal, stored["id"]):
            expected = [tuple(row) for row in connection.execute(statement, values)]
            ours = [tuple(row) for row in Prepared.of(statement, dialect).run(cursor, values)]
            assert ours == expected, statement
            assert [[type(v) for v in row] for row in ours] == [
                [type(v) for v in row] for row in expected
            ]
            seen += len(ours)
    assert seen > 10  # the cases found rows, not only nothing


def test_an_expanding_select_answers_the_same_for_every_count_of_items(
    sqlite_only: None, services: Services, stored: dict[str, Any]
) -> None:
    """The expansion kept per count of items serves another call of that count, with its
    own values; a literal IN list and a value rendered into the SQL keep theirs."""
    with services.db.session(write=False) as session:
        created = session.scalar(select(T.c.created_at).where(T.c.id == stored["id"]))
        ids = list(session.scalars(select(T.c.id).order_by(T.c.id)))
    assert created is not None
    dialect = services.db.read_engine.dialect
    by_ids = select(T.c.id, T.c.created_at).where(
        T.c.id.in_(bindparam("ids", expanding=True)),
        T.c.created_at.in_([created]),
        T.c.status != "deleted",
        T.c.created_at <= bindparam("until"),
    )
    limited = (
        select(T.c.id)
        .where(T.c.id.in_(bindparam("ids", expanding=True)))
        .order_by(T.c.id)
        .limit(bindparam("n", type_=Integer, literal_execute=True))
    )
    calls = [
        (by_ids, {"ids": ids, "until": created}),
        (by_ids, {"ids": [], "until": created}),
        (by_ids, {"ids": ids[:1], "until": created}),
        (by_ids, {"ids": ids[1:], "until": created}),  # the count of the first, other ids
        (by_ids, {"ids": ids, "until": created - timedelta(seconds=1)}),
        (limited, {"ids": ids, "n": 1}),
        (limited, {"ids": ids, "n": 2}),
    ]
    prepared = {id(statement): Prepared.of(statement, dialect) for statement, _ in calls}
    with services.db.read_engine.connect() as connection:
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        answers = []
        for statement, values in calls:
            expected = [tuple(row) for row in connection.execute(statement, values)]
            ours = [tuple(row) for row in prepared[id(statement)].run(cursor, values)]
            assert ours == expected, values
            answers.append(len(ours))
    assert answers == [2, 0, 1, 1, 0, 1, 2]


def test_the_reads_of_one_block_see_one_snapshot(sqlite_only: None, services: Services) -> None:
    count: Select[Any] = select(func.count()).select_from(db.Tenant)

    def write() -> None:
        with services.db.session() as session:
            create_tenant(session, "written-between-two-reads", services.now())

    with services.db.read_connection() as reads:
        before = reads.all(count, {})[0][0]
        writer = threading.Thread(target=write)
        writer.start()
        writer.join()
        assert reads.all(count, {})[0][0] == before  # the block's snapshot
    with services.db.read_connection() as reads:
        assert reads.all(count, {})[0][0] == before + 1


def test_a_raw_read_gives_its_connection_back_with_no_transaction_open(
    sqlite_only: None, services: Services
) -> None:
    """An open read transaction would pin the WAL: no checkpoint could pass its snapshot."""
    returned: list[Any] = []
    event.listen(services.db.read_engine, "checkin", lambda dbapi, _record: returned.append(dbapi))
    count: Select[Any] = select(func.count()).select_from(db.Tenant)
    with services.db.read_connection() as reads:
        reads.all(count, {})
    with pytest.raises(LookupError), services.db.read_connection() as reads:
        reads.all(count, {})
        raise LookupError("the use case gave up")
    with pytest.raises(Exception, match="no such column"), services.db.read_connection() as reads:
        reads.all(select(T.c.id, literal_column("nosuchcolumn")), {})
    assert len(returned) == 3
    assert not any(connection.in_transaction for connection in returned)


@pytest.mark.parametrize(
    "stored",
    [
        "2026-12-02 13:50:03.123456",
        "2026-12-02 13:50:03",
        "2026-12-02",
        "2026-12-02 13:50:03.123456+02:00",
        None,
    ],
)
def test_a_timestamp_is_read_from_sqlite_as_sqlalchemy_reads_it(stored: str | None) -> None:
    dialect = sqlite_dialect()
    column = db.UTCDateTime().dialect_impl(dialect)
    assert isinstance(column, db.UTCDateTime)
    ours = column.result_processor(dialect, None)
    theirs = TypeDecorator.result_processor(column, dialect, None)
    assert ours is not None and theirs is not None
    read = ours(stored)
    assert read == theirs(stored)
    assert read is None or read.tzinfo is UTC


@pytest.mark.parametrize(
    "stored",
    [
        "2026-12-02 13:50:03.123456",
        "2026-12-02 13:50:03.999999",
        "2026-12-02 13:50:03",
        "2026-12-02",
        "2026-12-02 13:50:03.123456+02:00",
        "2026-12-02T13:50:03.123456",
        # 26 characters too, a shorter fraction and a zone (PostgreSQL's text, imported)
        "2026-12-02 13:50:03.123+02",
        "2026-12-02 13:50:03.123-05",
        "2026-12-02 13:50:03.1+0530",
        "2026-12-02 13:50:03.1+0000",
        "2026-12-02 13:50:03.12345Z",
    ],
)
def test_a_timestamps_stored_text_is_answered_as_the_parsed_value_is(stored: str) -> None:
    """The list page reads created_at as SQLite's stored text and slices it; any text the
    column could hold answers what parsing it and formatting the value answers."""
    dialect = sqlite_dialect()
    column = db.UTCDateTime().dialect_impl(dialect)
    assert isinstance(column, db.UTCDateTime)
    parse = TypeDecorator.result_processor(column, dialect, None)  # SQLAlchemy's reading
    assert parse is not None
    value = parse(stored)
    assert db.timestamp_value(stored) == value
    assert db.timestamp_text(stored) == format_timestamp(value)
    assert db.timestamp_text(value) == format_timestamp(value)


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 12, 2, 13, 50, 3, 123456, tzinfo=UTC),
        datetime(2026, 12, 2, 13, 50, 3, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(2026, 12, 2, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_a_timestamp_as_sqlite_stores_it_is_sliced_to_the_answers_text(value: datetime) -> None:
    dialect = sqlite_dialect()
    bind = db.UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert bind is not None
    stored = bind(value)  # UTCDateTime's UTC, then SQLAlchemy's text for SQLite
    assert isinstance(stored, str)
    assert db.timestamp_text(stored) == format_timestamp(value)
    assert db.timestamp_value(stored) == value
    assert db.sqlite_timestamp_text(value) == stored  # what the list's cursor compares


@pytest.mark.parametrize(
    "member",
    [
        '"gpt"',
        '"été"',
        '""',
        '"a\\"b"',
        '"\\u00e9"',
        '"\\\\"',
        "7",
        "1.5",
        "null",
        "true",
        '{"a": "b"}',
        '["x"]',
        None,
    ],
)
def test_a_json_member_is_read_from_sqlite_as_the_json_parser_reads_it(member: str | None) -> None:
    process = sql._MemberText().result_processor(sqlite_dialect(), None)
    assert process is not None
    assert process(member) == (None if member is None else json.loads(member))


@pytest.mark.slow
def test_a_list_shape_made_again_is_not_compiled_again(
    sqlite_only: None, services: Services, admin_token: str
) -> None:
    """listing_sql keeps 512 shapes' selects; a caller picks the shape (any workload filter
    path), so a shape comes back as a new select. Its compiled statement is found by the
    shape, not kept again beside the old one (which pinned ~0.4 MB a 16-filter shape, up to
    2,048 of them)."""
    principal = _principal(services, admin_token)
    shapes = (sql.statement.cache_info().maxsize or 0) + 8
    compiled = 0
    real_of = Prepared.of

    def counting(statement: Any, dialect: Any, column_keys: Any = None) -> Prepared:
        nonlocal compiled
        compiled += 1
        return real_of(statement, dialect, column_keys)

    sql.statement.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Prepared, "of", staticmethod(counting))
        for _ in range(2):
            for i in range(shapes):
                query = parse_list_query([("limit", "1"), (f"m{i}.x", "1")])
                listing.page_text(services, principal, query)
    assert compiled <= shapes  # each shape once


def test_the_compiled_statements_kept_are_the_most_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reads, "PREPARED_LIMIT", 2)
    cache = PreparedCache(sqlite_dialect())
    first, second, third = (select(T.c.id).where(T.c.name == str(n)) for n in range(3))
    kept = cache.get(first)
    cache.get(second)
    assert cache.get(first) is kept  # used again: now the most recent
    cache.get(third)  # drops second, the least recently used
    assert cache.get(first) is kept
    assert cache.get(second) is not None and cache.get(third) is not None
    assert cache.get(first) is not kept  # dropped when second and third came back
