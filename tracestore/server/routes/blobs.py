"""The presigned routes the service answers itself (no bearer token: the signature is the
grant; paths and signatures are ``presigned.py``): the archive of a traceset, whatever the
store, and the embedded store's part PUT and content GET, mounted only when the bytes are
in the embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from starlette.responses import MalformedRangeHeader

from tracestore.server import downloads, presigned, receiving
from tracestore.server.deps import ServicesDep, error_responses
from tracestore.server.serving.body_protocol import receive_into
from tracestore.server.storage.blobs import content_disposition
from tracestore.server.storage.local import LocalBlobStore

_TAGS: list[str | Enum] = ["embedded blob store"]
router = APIRouter(prefix=presigned.PREFIX, tags=_TAGS)
local_store_router = APIRouter(prefix=presigned.PREFIX, tags=_TAGS)
_BINARY = {"schema": {"type": "string", "format": "binary"}}
# No bearer token on these routes: the signature is the grant, so a bad one answers 403.
_BAD_URL = "The URL's query is missing or malformed (expires, signature, partSize ...)"
_BAD_SIGNATURE = "The URL's signature does not match, or it has expired"


async def _local_store(services: ServicesDep) -> LocalBlobStore:
    # app.create_app mounts local_store_router only when the store is the embedded one.
    # Async: FastAPI runs a plain def dependency in a worker thread, a hop per part PUT.
    return cast(LocalBlobStore, services.store)


LocalStoreDep = Annotated[LocalBlobStore, Depends(_local_store)]


class ClosingStream(StreamingResponse):
    """A streamed answer of ``chunks`` (a generator reading files) that closes it when the
    answer ends, however it ends. Left unfinished (its client gone, or cut off by the send
    deadline), Starlette drops the generator, which a reference cycle keeps, with the blob
    file it has open, until the next cyclic garbage collection: on an idle server, for long."""

    def __init__(self, chunks: Iterator[bytes], **options: Any) -> None:
        super().__init__(chunks, **options)
        self._chunks = chunks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # The thread that read the last chunk has returned (anyio waits for it even
            # when cancelled), so the generator is not running: closing it is safe.
            await cast(Any, self.body_iterator).aclose()
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()


@router.get(
    presigned.ARCHIVE,
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/zip": _BINARY}, "description": "The ZIP archive"},
        **error_responses(
            400,
            403,
            404,
            409,
            500,
            s400=_BAD_URL,
            s403=_BAD_SIGNATURE,
            s409="The traceset is no longer ready (deleted since the URL was signed)",
        ),
    },
)
def get_archive(
    traceset_id: str,
    services: ServicesDep,
    expires: int,
    signature: str,
    select: Annotated[
        str, Query(description="The ranks of a ranks download, as the signed URL gives them")
    ] = "",
) -> StreamingResponse:
    """Stream the ZIP of every file of a traceset (or of the ranks ``select`` names, with
    their manifest) through a presigned archive URL."""
    archive = downloads.open_archive(services, traceset_id, expires, signature, select)
    return ClosingStream(
        archive.chunks,
        media_type="application/zip",
        headers={
            "Content-Length": str(archive.size),
            "Content-Disposition": content_disposition(archive.filename),
        },
    )


@local_store_router.put(
    presigned.PART,
    status_code=200,
    response_class=Response,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": _BINARY},
            "description": "The part's bytes, exactly its size",
        }
    },
    responses={
        200: {
            "description": "Stored; the ETag header names the part (no body)",
            "headers": {"ETag": {"schema": {"type": "string"}, "description": "The part's ETag"}},
        },
        **error_responses(
            400,
            403,
            404,
            409,
            410,
            413,
            429,
            500,
            s400=_BAD_URL + ", or the body is shorter than the part",
            s403=_BAD_SIGNATURE,
            s404="No such upload session",
            s409="The session takes no more parts (failed or completed)",
            s410="The session has expired",
            s413="The body is longer than the part",
            s429="Too many bodies of this part or upload at once; retry later",
        ),
    },
)
async def put_part(
    request: Request,
    services: ServicesDep,
    store: LocalStoreDep,
    upload_id: str,
    position: int,
    part_number: int,
    size: int,
    expires: int,
    signature: str,
    part_size: Annotated[int, Query(alias="partSize")],
    checksum: Annotated[str | None, Header(alias="x-amz-checksum-sha256")] = None,
) -> Response:
    """Receive one part of an upload, written to disk as it arrives."""
    grant = presigned.PartGrant(upload_id, position, part_number, size, part_size, expires)
    etag = await receiving.put_part(
        services,
        store,
        grant,
        signature,
        request.headers.get("content-length"),
        request.stream(),
        checksum,
        into=receive_into(request.scope),
    )
    return Response(status_code=200, headers={"ETag": etag})


class BlobResponse(FileResponse):
    # Each chunk is a thread hop; Starlette's 64 KiB default spends more on hops than on bytes.
    chunk_size = 1024 * 1024

    @classmethod
    def _parse_range_header(cls, http_range: str, file_size: int) -> list[tuple[int, int]]:
        # A Range that is not one (another unit, no range, bytes that are not text) is
        # ignored, as RFC 9110 has it: the whole blob, not Starlette's plain-text 400.
        try:
            return super()._parse_range_header(http_range, file_size)
        except MalformedRangeHeader:
            return []


@local_store_router.get(
    presigned.CONTENT,
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": _BINARY}, "description": "The blob"},
        206: {
            "content": {"application/octet-stream": _BINARY},
            "description": "The range asked for (a Range request)",
        },
        **error_responses(
            400,
            403,
            410,
            500,
            s400=_BAD_URL,
            s403=_BAD_SIGNATURE,
            s410="The bytes were purged after the URL was signed",
        ),
        416: {"description": "The range asked for lies outside the blob (no body)"},
    },
)
def get_blob(
    sha256: str,
    services: ServicesDep,
    store: LocalStoreDep,
    name: str,
    expires: int,
    signature: str,
) -> FileResponse:
    """Serve a blob through a presigned download URL (range requests supported)."""
    path, stat = downloads.local_blob(services, store, sha256, name, expires, signature)
    return BlobResponse(
        path,
        stat_result=stat,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": content_disposition(name),
            "ETag": f'"{sha256}"',
            "x-amz-meta-sha256": sha256,
        },
    )
