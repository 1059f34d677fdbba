"""The libraries' answers: the content-addressed content tracesets share, listed a page at a
time and shown with its files and the tracesets that hold it (snake_case, as the reference)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracestore.schemas.wire import Pagination, Scope, SnakeWireModel, Timestamp, WireModel


class LibraryItem(SnakeWireModel):
    """A library as listed: the blobs of one traceset content, shared by the tracesets with
    that content. ``scope`` is the widest scope, and ``reference_count`` the number, of the
    live tracesets the caller may see that hold it."""

    id: str
    hash_short: str
    storage_url: str = Field(description="The store's root; each blob's key is as resolve says")
    layout: Literal["cas"] = "cas"
    scope: Scope
    total_size: int
    reference_count: int
    created: Timestamp = Field(description="When the first of those tracesets was completed")


class LibraryPage(WireModel):
    """Body of ``GET /api/v1/libraries``: one page of libraries."""

    items: list[LibraryItem]
    pagination: Pagination


class LibraryTraceset(SnakeWireModel):
    id: str
    name: str
    workspace_id: str


class LibraryFile(SnakeWireModel):
    name: str
    size: int
    hash: str


class Library(LibraryItem):
    """Body of ``GET /api/v1/libraries/{id}``: the library with its files and the tracesets
    the caller may see that hold it."""

    hash: str
    files: list[LibraryFile]
    tracesets: list[LibraryTraceset]
