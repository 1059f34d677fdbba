"""When a tag drives its list page (``Shape.tag_driven``): a tag on few tracesets costs less
looked up from its own rows than found by walking the sort's order, which for a tag on one
traceset in 500 reads 25,000 rows a page at a million tracesets. ``rarest`` weighs each
tag's count against the table's size; ``tagged`` and ``TagsFirst`` are how ``listing.sql``
starts a page from the chosen tag's rows on each engine."""

from __future__ import annotations

import functools
import math
from typing import Any

from sqlalchemy import (
    ColumnElement,
    any_,
    bindparam,
    column,
    func,
    literal,
    literal_column,
    select,
    table,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Join, Select

from tracestore.server import db
from tracestore.server.db.prepared import Reads

T = db.Traceset
G = db.TracesetTag

# A tag held by at most this many tracesets may drive its page: each of them looked up by
# id, then sorted. Beyond it the walk in the sort's order always does.
RARE_TAG = 5_000


def rarest(reads: Reads, tags: tuple[str, ...], fetch: int, dialect: str) -> str | None:
    """The rarest of ``tags`` if its page costs less driven from its tracesets than walked
    (``drives``), else None. Each tag is counted only as far as it could drive."""
    if not tags:
        return None
    (size,) = reads.all(table_size(dialect), {})[0]
    values: dict[str, Any] = {f"t{i}": tag for i, tag in enumerate(tags)}
    values["cap"] = most_driving(size, fetch) + 1
    counts = reads.all(tag_counts(len(tags)), values)[0]
    driving = [(count, tag) for tag, count in zip(tags, counts, strict=True)]
    chosen = min((pair for pair in driving if drives(pair[0], size, fetch)), default=None)
    return None if chosen is None else chosen[1]


def most_driving(size: float, fetch: int) -> int:
    """The most tracesets a tag may hold and drive a page of ``fetch`` rows out of about
    ``size`` (0 or less: not known). Driven, a page looks up each of the tag's ``count``
    tracesets; walked, it reads about ``fetch`` rows for each share of the table the tag
    holds, ``fetch * size / count`` (at a million tracesets, 25,000 rows for a tag on one
    in 500; at ten thousand, a tag on every third is found in 60). So a tag drives when
    ``count ** 2 <= fetch * size``, and never beyond RARE_TAG (every tenant's tracesets
    counted: a tag rare in the table is rare in what the caller sees)."""
    if size <= 0:
        return RARE_TAG
    return max(min(RARE_TAG, math.isqrt(int(fetch * size))), 0)


def drives(count: int, size: float, fetch: int) -> bool:
    """Whether a tag on ``count`` of about ``size`` tracesets drives a page of ``fetch``
    rows (``most_driving``)."""
    return count <= most_driving(size, fetch)


def tagged(dialect: str) -> ColumnElement[bool]:
    """The tracesets that hold the rare tag ``g0`` (``Shape.tag_driven``), so that each
    engine starts from its few rows and looks each traceset up by id. On PostgreSQL an
    array the statement computes once (an initplan: a semi-join left the planner free to
    walk the sort's index instead, probing the tag per row); on SQLite the tag's rows are
    the outer loop of a CROSS JOIN (``TagsFirst``), which its planner never reorders (an
    ``IN`` list it took for 25 rows, and walked a workspace's index it took for 10)."""
    if dialect == "postgresql":
        held = select(G.traceset_id).where(G.tag == bindparam("g0"))
        return T.id == any_(func.array(held.scalar_subquery()))
    return _TAGGED.c.tag == bindparam("g0")


# The driving tag's rows on SQLite, by a name of their own: the other tags' EXISTS must not
# correlate to them.
_TAGGED = G.__table__.alias("tagged")


class TagsFirst(Join):
    """``traceset_tags CROSS JOIN tracesets ON ...``: SQLite keeps a CROSS JOIN's tables in
    the order written (https://sqlite.org/optoverview.html#manual_control_of_join_order)."""

    inherit_cache = True

    def __init__(self) -> None:
        super().__init__(_TAGGED, T.__table__, _TAGGED.c.traceset_id == T.id)


@compiles(TagsFirst)
def _cross_join(join: TagsFirst, compiler: Any, **kw: Any) -> str:
    kw["asfrom"] = True
    left = compiler.process(join.left, **kw)
    right = compiler.process(join.right, **kw)
    return f"{left} CROSS JOIN {right} ON {compiler.process(join.onclause, **kw)}"


@functools.lru_cache(maxsize=2)
def table_size(dialect: str) -> Select[Any]:
    """About how many tracesets there are (0 or less: not known), an estimate for free:
    SQLite's largest rowid (the end of the table's b-tree; rows purged leave it higher),
    PostgreSQL's planner's count (-1 before the table was first analysed). ``pages``
    weighs a tag's count against it."""
    if dialect == "postgresql":
        pg_class = table("pg_class", column("oid"), column("reltuples"))
        size: Any = (
            select(pg_class.c.reltuples)
            .where(pg_class.c.oid == literal_column("'tracesets'::regclass"))
            .scalar_subquery()
        )
    else:
        size = select(func.max(literal_column("tracesets.rowid"))).select_from(T).scalar_subquery()
    return select(func.coalesce(size, 0))


@functools.lru_cache(maxsize=16)
def tag_counts(tags: int) -> Select[Any]:
    """How many tracesets hold each of the tags ``t0`` ... (``tags`` of them), each counted
    up to ``cap``: a range of the tags' primary key read in its order, which stops at the
    cap (unordered, PostgreSQL took a tag whose rows were all written last for a scan of
    the table, 110-170 ms, or read all of a common tag's entries by bitmap)."""
    counts = []
    for i in range(tags):
        held = (
            select(literal(1))
            .where(G.tag == bindparam(f"t{i}"))
            .order_by(G.tag, G.traceset_id)
            .limit(bindparam("cap"))
        )
        counts.append(select(func.count()).select_from(held.subquery()).scalar_subquery())
    return select(*counts)
