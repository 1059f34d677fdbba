"""The SELECT behind the traceset list, built once per query shape and reused.

The query is a UNION ALL of one ordered, limited arm per way a traceset can be visible
(``workspace`` scope in each of the caller's workspaces, ``tenant`` scope in the caller's
tenant, ``public``), so each arm walks an index in sort order and stops after one page: the
cost of a page depends on the page size and the filters' selectivity, not on the table size.

Every value is a named bind parameter, so a statement depends only on the query's *shape*
(which filters, which sort, how many arms: ``listing_plan``); statements are cached per
shape, which also lets SQLAlchemy reuse their compiled form.

Sorted by ``step_time`` first, each arm is two: the analysed tracesets in (step time,
created, id) order, which walk migration 0009's partial index of the arm, then those
without a step time in (created, id) order, which walk the arm's creation index; a cursor
past the first part leaves it out.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Text,
    TypeDecorator,
    and_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import BindParameter

from tracestore.inspect.census import CENSUS_FACT
from tracestore.server import db
from tracestore.server.inspection import census_columns
from tracestore.server.listing import rare_tags
from tracestore.server.listing.plan import Shape
from tracestore.server.listing.query import SortKey

T = db.Traceset
F = db.TracesetFact
G = db.TracesetTag
U = db.User


# --- the sort order as "atoms": (expression, direction, label) ---


@dataclass(frozen=True)
class _Atom:
    label: str
    expr: ColumnElement[Any] | InstrumentedAttribute[Any]
    descending: bool
    mark: Any = None  # the type the cursor's value binds as, when not the column's


def _atoms(sort: tuple[SortKey, ...], source: Any, dialect: str) -> list[_Atom]:
    """The sort's atoms over ``source``'s columns (the table's, or the chosen page's)."""
    atoms: list[_Atom] = []
    for index, key in enumerate(sort):
        label = f"k{index}"
        if key.field == "created":
            # On SQLite the cursor holds the stored text (``listing._cursor_created``).
            mark = Text() if dialect == "sqlite" else None
            atoms.append(_Atom(label, source.created_at, key.descending, mark))
        elif key.field == "name":  # the database's collation: byte order on SQLite
            atoms.append(_Atom(label, source.name, key.descending))
        elif key.field == "status":
            atoms.append(_Atom(label, source.status, key.descending))
        elif key.field == "size":
            atoms.append(_Atom(label, source.total_size, key.descending))
        elif key.field == "step_time":  # without one last, ties in creation order
            step = source.median_step_time_us
            atoms.append(_Atom(label + "n", case((step.is_(None), 1), else_=0), False))
            atoms.append(_Atom(label, func.coalesce(step, 0.0), key.descending))
            mark = Text() if dialect == "sqlite" else None
            atoms.append(_Atom(label + "c", source.created_at, key.descending, mark))
        else:  # rankCount: tracesets without a rank count come last in both directions
            missing = case((source.rank_count.is_(None), 1), else_=0)
            atoms.append(_Atom(label + "n", missing, False))
            atoms.append(_Atom(label, func.coalesce(source.rank_count, 0), key.descending))
    atoms.append(_Atom("kid", source.id, sort[-1].descending))
    return atoms


def _after(atoms: list[_Atom]) -> ColumnElement[bool]:
    """Rows strictly after the cursor (``a_`` and each atom's label) in the atoms' order."""
    marks: list[BindParameter[Any]] = [
        bindparam(f"a_{atom.label}", type_=atom.mark) for atom in atoms
    ]
    alternatives = []
    for i, atom in enumerate(atoms):
        equal = [atoms[j].expr == marks[j] for j in range(i)]
        beyond = atom.expr < marks[i] if atom.descending else atom.expr > marks[i]
        alternatives.append(and_(*equal, beyond))
    first = atoms[0]
    # The redundant bound on the leading column lets an index range scan start at the cursor.
    lead = first.expr <= marks[0] if first.descending else first.expr >= marks[0]
    return and_(lead, or_(*alternatives))


# --- conditions ---


def _pg_member(path: tuple[str, ...]) -> ColumnElement[Any]:
    # Segments are [a-z][a-z0-9_]* (checked at parse), so inlining them is safe, and inlined
    # keys can match expression indexes.
    return literal_column("tracesets.workload_metadata" + "".join(f" -> '{s}'" for s in path))


def _sqlite_workload_condition(index: int, path: tuple[str, ...], kind: str) -> ColumnElement[bool]:
    value: BindParameter[Any] = bindparam(f"w{index}")
    # SQLite's json_extract answers 1 for true: json_type keeps the equality JSON-typed.
    where: ColumnElement[Any] = literal_column("'$." + ".".join(path) + "'")
    member_kind = func.json_type(T.workload_metadata, where)
    if kind in ("null", "true", "false"):
        return member_kind == kind
    extracted = func.json_extract(T.workload_metadata, where) == value
    # The equality first: SQLite parses the document for each function, and a scan's rows
    # mostly fail it, so most rows are parsed once, not twice (1.5 x faster scans).
    if kind == "text":
        return and_(extracted, member_kind == "text")
    return and_(extracted, member_kind.in_(("integer", "real")))


def _conditions(shape: Shape) -> list[ColumnElement[bool]]:
    postgres = shape.dialect == "postgresql"
    conditions: list[ColumnElement[bool]] = [
        T.status == bindparam("status") if shape.status else T.status != "deleted"
    ]
    if shape.search and postgres:
        conditions.append(T.name.ilike(bindparam("search"), escape="\\"))
    elif shape.search:  # unicode_lower: registered on every SQLite connection (database.py)
        conditions.append(func.instr(func.unicode_lower(T.name), bindparam("search")) > 0)
    if shape.created_after:
        conditions.append(T.created_at >= bindparam("created_after"))
    if shape.created_before:
        conditions.append(T.created_at < bindparam("created_before"))
    if shape.min_rank_count:
        conditions.append(T.rank_count >= bindparam("min_rank_count"))
    if shape.max_rank_count:
        conditions.append(T.rank_count <= bindparam("max_rank_count"))
    # SQLite would range-scan the world-size index and sort every match; "+ 0" keeps it on
    # the ordered walk, which stops after a page (PostgreSQL weighs both by statistics).
    world = T.inspected_world_size if postgres else T.inspected_world_size + 0
    if shape.min_world_size:
        conditions.append(world >= bindparam("min_world_size"))
    if shape.max_world_size:
        conditions.append(world <= bindparam("max_world_size"))
    # The same for the analysis's medians, which have an index each.
    idle = T.median_idle_pct if postgres else T.median_idle_pct + 0
    if shape.min_idle_pct:
        conditions.append(idle >= bindparam("min_idle_pct"))
    if shape.max_idle_pct:
        conditions.append(idle <= bindparam("max_idle_pct"))
    if shape.min_overlap_pct:
        overlap = T.median_overlap_pct if postgres else T.median_overlap_pct + 0
        conditions.append(overlap >= bindparam("min_overlap_pct"))
    for i, fact in enumerate(shape.inspected):
        # A primary-key lookup of (fact, value, id) per candidate row; PostgreSQL may instead
        # drive the page from the facts when the value is rare.
        conditions.append(
            exists().where(
                F.fact == literal(fact), F.value == bindparam(f"f{i}"), F.traceset_id == T.id
            )
        )
    if shape.uploaded_by:  # the arms walk migration 0010's (uploader, ...) indexes
        conditions.append(T.created_by == bindparam("uploaded_by"))
    for i in range(shape.tags):
        if i == 0 and shape.tag_driven:
            conditions.append(rare_tags.tagged(shape.dialect))
            continue
        # As the facts: a primary-key lookup of (tag, id) per candidate row.
        conditions.append(exists().where(G.tag == bindparam(f"g{i}"), G.traceset_id == T.id))
    if shape.census is not None:
        # The verdict is a fact (inspection.census_facts): a primary-key lookup per row.
        verdicts: list[Any] = (
            [bindparam("census")]
            if shape.census == "recorded"
            else [literal("pass"), literal("fail")]
        )
        recorded = exists().where(
            F.fact == literal(CENSUS_FACT), F.value.in_(verdicts), F.traceset_id == T.id
        )
        conditions.append(recorded if shape.census == "recorded" else ~recorded)
    if shape.contradictory:
        conditions.append(false())
    if not postgres:
        conditions.extend(
            _sqlite_workload_condition(i, path, kind)
            for i, (path, kind) in enumerate(shape.workload)
        )
    elif shape.workload and not shape.contradictory:
        # All filters as one @> document: with object nesting and scalar leaves, containment
        # is exactly JSON-typed equality of each member (1024 = 1024.0, "1024" <> 1024, an
        # array holding the value does not match), and the GIN index (jsonb_path_ops) and
        # the planner's statistics both understand it.
        conditions.append(T.workload_metadata.op("@>")(cast(cast(bindparam("wdoc"), Text), JSONB)))
    return conditions


def _arms(shape: Shape) -> list[ColumnElement[bool]]:
    """Disjoint visibility conditions (by scope), one per ordered arm of the union."""
    arms: list[ColumnElement[bool]] = []
    # On SQLite the scope's term is "+scope" (a no-op SQLite never answers from an index):
    # without statistics (which nothing gathers) its planner took "scope = 'workspace'" as
    # good an index key as the workspace, and walked every tenant's workspace rows.
    scope = T.scope if shape.dialect == "postgresql" else literal_column("+tracesets.scope")
    in_workspace = scope == "workspace"
    if shape.workspace_arms == -1:
        arms.append(and_(T.workspace_id.in_(bindparam("ws_in", expanding=True)), in_workspace))
    for i in range(max(shape.workspace_arms, 0)):
        arms.append(and_(T.workspace_id == bindparam(f"ws{i}"), in_workspace))
    if shape.tenant_arm:
        arms.append(and_(T.scope == "tenant", T.tenant_id == bindparam("tenant")))
    if shape.public_arm:
        arms.append(T.scope == "public")
    return arms


def _summary_columns(dialect: str) -> list[ColumnElement[Any]]:
    members = ("workload_family", "workload_name")
    if dialect == "postgresql":
        return [_pg_member((m,)).label(m) for m in members]
    # SQLite's -> answers the member as JSON text, which _MemberText decodes.
    return [
        T.workload_metadata.op("->", return_type=_MemberText)(literal_column(f"'$.{m}'")).label(m)
        for m in members
    ]


def _member_text(value: Any) -> Any:
    if value is None:
        return None
    if (
        isinstance(value, str)
        and len(value) >= 2
        and value[0] == '"'
        and value[-1] == '"'
        and "\\" not in value
        and '"' not in value[1:-1]
    ):
        return value[1:-1]
    return json.loads(value)


class _MemberText(TypeDecorator[Any]):
    """A member of a JSON document as SQLite's -> answers it (JSON text), decoded: a plain
    string (the common case: a family, a name) by slicing off its quotes, anything else by
    the JSON parser. Forty json.loads a list page were a tenth of its CPU; the processor is
    ``_member_text`` itself, not TypeDecorator's wrapper around a ``process_result_value``."""

    impl = Text
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _member_text


@functools.lru_cache(maxsize=512)
def statement(shape: Shape) -> Select[Any]:
    """The SELECT for one shape of query (cached: building one costs milliseconds): the
    page's rows (``_chosen``), each joined again to its traceset for the two members of its
    workload metadata the page shows, and to its uploader for their name. Read after the page
    is chosen, the metadata is parsed (or, on PostgreSQL, decompressed) for the page's rows
    only, never carried through a sort; in the same statement, not a second one (a second
    select cost a sixth of the page). On SQLite ``created_at`` is its stored text
    (``db.timestamp_text`` slices it)."""
    page = _chosen(shape).subquery("chosen")
    # The chosen rows again in the sort's order: a join keeps no order of its own.
    order = [
        atom.expr.desc() if atom.descending else atom.expr.asc()
        for atom in _atoms(shape.sort, page.c, shape.dialect)
    ]
    return (
        select(
            *(page.c[name] for name in PAGE_COLUMNS[:-1]),
            db.stored_timestamp(page.c.created_at, shape.dialect),
        )
        .add_columns(
            *_summary_columns(shape.dialect),
            page.c.median_step_time_us,
            T.created_by,
            U.name,
        )
        .add_columns(*census_columns(page.c.id, shape.dialect))
        .join_from(page, T, T.id == page.c.id)
        .outerjoin(U, U.id == T.created_by)
        .order_by(*order)
    )


# The chosen rows' columns, which the page reads by position (listing.page_text) before the
# two workload members (and after them the step time, a cursor's value, and the census).
PAGE_COLUMNS = (
    "id",
    "name",
    "status",
    "scope",
    "workspace_id",
    "file_count",
    "total_size",
    "rank_count",
    "created_at",
)


def _chosen(shape: Shape) -> Select[Any]:
    """The page's rows: the PAGE_COLUMNS of at most ``fetch`` tracesets, in the sort's
    order. The union's parts also carry the sort's atoms, labelled, for the outer ORDER BY."""
    atoms = _atoms(shape.sort, T, shape.dialect)
    conditions = _conditions(shape)
    columns = [getattr(T, name) for name in (*PAGE_COLUMNS, "median_step_time_us")]
    fetch = bindparam("fetch", type_=Integer)
    arms = _arms(shape)
    if not arms:
        return select(*columns).where(false()).limit(fetch)
    if shape.tag_driven:
        # A few thousand tracesets at most, each looked up by id and sorted: one select
        # over every arm at once (per arm, each would look up every one of them).
        after = [_after(atoms)] if shape.after else []
        driven = select(*columns)
        if shape.dialect != "postgresql":
            driven = driven.select_from(rare_tags.TagsFirst())
        return driven.where(or_(*arms), *after, *conditions).order_by(*_order(atoms)).limit(fetch)
    if shape.sort[0].field == "step_time":
        parts = [part for arm in arms for part in _step_time_parts(shape, arm, atoms)]
    else:
        after = [_after(atoms)] if shape.after else []
        parts = [([arm, *after], atoms) for arm in arms]
    if len(parts) == 1:
        where, ordered = parts[0]
        return select(*columns).where(*where, *conditions).order_by(*_order(ordered)).limit(fetch)
    labelled = [*columns, *(atom.expr.label(atom.label) for atom in atoms)]
    first, *rest = (
        select(
            select(*labelled)
            .where(*where, *conditions)
            .order_by(*_order(ordered))
            .limit(fetch)
            .subquery()
        )
        for where, ordered in parts
    )
    union = first.union_all(*rest).subquery("page")
    outer = [
        union.c[atom.label].desc() if atom.descending else union.c[atom.label].asc()
        for atom in atoms
    ]
    return select(*(union.c[column.key] for column in columns)).order_by(*outer).limit(fetch)


def _order(atoms: list[_Atom]) -> list[Any]:
    return [atom.expr.desc() if atom.descending else atom.expr.asc() for atom in atoms]


def _step_time_parts(
    shape: Shape, arm: ColumnElement[bool], atoms: list[_Atom]
) -> list[tuple[list[ColumnElement[bool]], list[_Atom]]]:
    """An arm sorted by step time first, as its two parts (each its conditions and its
    order): the analysed tracesets by (step time, created, ...), those without by
    (created, ...); a cursor past the analysed ones leaves their part out."""
    step = T.median_step_time_us
    _, value, created, *rest = atoms
    present = [replace(value, expr=step), created, *rest]
    absent = [created, *rest]
    parts: list[tuple[list[ColumnElement[bool]], list[_Atom]]] = []
    if not shape.after_missing_step:
        after = [_after(present)] if shape.after else []
        parts.append(([arm, step.is_not(None), *after], present))
    after = [_after(absent)] if shape.after_missing_step else []
    parts.append(([arm, step.is_(None), *after], absent))
    return parts
