"""``ApiClient``, what ``Client`` is built on: the tracestore API's routes, one typed method
each, over the one request helper of ``calls.ApiCaller`` (which sends the token, retries what
is safe to send again and raises an error answer's ``tracestore.errors`` class).

It imports no server dependency.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from tracestore import schemas
from tracestore.client.calls import API, API_PREFIX, ApiCaller, answer, segment
from tracestore.errors import Conflict

LIBRARIES = API_PREFIX + "/libraries"
COMPLETE_TIMEOUT = httpx.Timeout(3600.0, connect=10.0)
_LIST_PARAMS = {
    "workspace_id": "workspaceId",
    "status": "status",
    "scope": "scope",
    "census": "census",
    "search": "search",
    "sort": "sort",
    "created_after": "createdAfter",
    "created_before": "createdBefore",
    "min_rank_count": "minRankCount",
    "max_rank_count": "maxRankCount",
    "min_world_size": "minWorldSize",
    "max_world_size": "maxWorldSize",
    "uploaded_by": "uploadedBy",
}
# The analysis filters: percentages, sent as the service reads them (no exponent).
_PERCENT_PARAMS = {
    "min_idle_pct": "minIdlePct",
    "max_idle_pct": "maxIdlePct",
    "min_overlap_pct": "minOverlapPct",
}


class Keep:
    """The type of ``KEEP``: a member ``edit_traceset`` leaves as it is (``None`` removes)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()


def _query_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat()).replace("+00:00", "Z")
    return str(value)


def _percent(value: object) -> str:
    """A percentage as the list's analysis filters read it: ``12.5``, never ``1e-07``."""
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return str(value)


class ApiClient(ApiCaller):
    """The API's routes at ``base_url``, one typed method each, called with the API token
    ``token``; ``Client`` adds what takes several calls (every page of a listing, whole
    uploads and downloads). ``reached``: the service is known to be there (a connection it
    refuses is a restart, waited out as for a service that has answered this client)."""

    # --- tracesets ---

    def get_traceset(self, traceset_id: str) -> schemas.Traceset:
        """The traceset with its files and its workloadMetadata exactly as given."""
        response = self._call("GET", f"{API}/{segment(traceset_id)}")
        return answer(response, schemas.Traceset)

    def get_analysis(
        self, traceset_id: str, *, ranks: str | None = None
    ) -> schemas.TracesetAnalysis:
        """Where each rank's GPU time went: the traceset's analysis (``status`` ``pending``
        while its jobs run), optionally only the entries of ``ranks`` (``"0-7,12"``)."""
        params = None if ranks is None else [("ranks", ranks)]
        response = self._call("GET", f"{API}/{segment(traceset_id)}/analysis", params=params)
        return answer(response, schemas.TracesetAnalysis)

    def compare_tracesets(
        self,
        traceset_id: str,
        other_id: str,
        *,
        base_ranks: str | None = None,
        other_ranks: str | None = None,
        steps: str | None = None,
    ) -> schemas.TracesetComparison:
        """What changed from ``traceset_id`` (the base) to ``other_id``: per kernel name the
        calls and durations with their differences (slower first), the names added, deleted,
        called more, less or as often, and per rank the differences of the analysis's
        figures. ``base_ranks``/``other_ranks`` (``"0-7"``) choose the ranks that meet in
        order (default: those both hold), ``steps`` the ProfilerStep numbers (default: all).
        ``Conflict`` while either analysis is not complete."""
        params = [("with", other_id)]
        for name, value in (("baseRanks", base_ranks), ("otherRanks", other_ranks)):
            if value is not None:
                params.append((name, value))
        if steps is not None:
            params.append(("steps", steps))
        response = self._call("GET", f"{API}/{segment(traceset_id)}/compare", params=params)
        return answer(response, schemas.TracesetComparison)

    def delete_traceset(self, traceset_id: str) -> None:
        """Soft-delete a traceset (its status becomes ``deleted``)."""
        self._call("DELETE", f"{API}/{segment(traceset_id)}")

    def list_page(self, *, cursor: str | None = None, **filters: Any) -> schemas.TracesetPage:
        """One page of ``GET /api/v1/tracesets``; see ``list_tracesets`` for the filters."""
        params = self._list_params(filters)
        if cursor:
            params.append(("next", cursor))
        response = self._call("GET", API, params=params)
        return answer(response, schemas.TracesetPage)

    @staticmethod
    def _list_params(filters: Mapping[str, Any]) -> list[tuple[str, str]]:
        params: list[tuple[str, str]] = []
        for key, value in filters.items():
            if value is None:
                continue
            if key == "page_size":
                params.append(("limit", str(value)))
            elif key == "workload":
                params.extend((path, _query_value(v)) for path, v in dict(value).items())
            elif key == "inspected":
                params.extend((f"inspected.{f}", _query_value(v)) for f, v in dict(value).items())
            elif key == "tags":  # every one of them; a bare string is one tag
                params.extend(
                    ("tag", tag) for tag in ([value] if isinstance(value, str) else value)
                )
            elif key in _PERCENT_PARAMS:
                params.append((_PERCENT_PARAMS[key], _percent(value)))
            else:
                params.append((_LIST_PARAMS.get(key, key), _query_value(value)))
        return params

    def edit_traceset(
        self,
        traceset_id: str,
        *,
        name: str | None = None,
        description: str | Keep | None = KEEP,
        tags: Sequence[str] | None = None,
        add_tags: Sequence[str] | None = None,
        remove_tags: Sequence[str] | None = None,
    ) -> schemas.Traceset:
        """Change a traceset's name, description (``None`` removes it) or tags (``tags``
        replaces them; ``add_tags``/``remove_tags`` change the ones held): its uploader or a
        tenant admin (else ``Forbidden``). What is not given is kept; the traceset, with
        ``edited_at``/``edited_by`` recording the edit, is returned."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if not isinstance(description, Keep):
            body["description"] = description
        for member, value in (("tags", tags), ("addTags", add_tags), ("removeTags", remove_tags)):
            if value is not None:
                body[member] = list(value)
        response = self._call("PATCH", f"{API}/{segment(traceset_id)}", body=body)
        return answer(response, schemas.Traceset)

    def promote_traceset(
        self,
        traceset_id: str,
        target: str = "tenant",
        workload_metadata: Any = None,
        description: str | None = None,
        tags: Sequence[str] | None = None,
        force: bool = False,
    ) -> schemas.PromoteAnswer:
        """Widen a ready traceset's scope one step (``tenant``, then ``public``), optionally
        replacing its workloadMetadata, description and tags (docs/api.md). A traceset that fails
        its census raises ``Conflict`` naming the failed checks, unless ``force``."""
        body: dict[str, Any] = {"target": target}
        if force:
            body["force"] = True
        if workload_metadata is not None:
            body["workloadMetadata"] = workload_metadata
        if description is not None:
            body["description"] = description
        if tags is not None:
            body["tags"] = list(tags)
        response = self._call("POST", f"{API}/{segment(traceset_id)}/promote", body=body)
        return answer(response, schemas.PromoteAnswer)

    def validate_traceset(self, traceset_id: str) -> schemas.ValidateAnswer:
        """Re-verify a traceset's bytes and metadata on the service."""
        response = self._call(
            "POST", f"{API}/{segment(traceset_id)}/validate", timeout=COMPLETE_TIMEOUT
        )
        return answer(response, schemas.ValidateAnswer)

    def resolve_traceset(self, traceset_id: str) -> schemas.ResolveAnswer:
        """Where a traceset's bytes are (``s3://`` or ``file://``), for a simulator host."""
        response = self._call("GET", f"{API}/{segment(traceset_id)}/resolve")
        return answer(response, schemas.ResolveAnswer)

    def list_libraries(
        self, *, cursor: str | None = None, **params: str | int
    ) -> schemas.LibraryPage:
        """One page of ``GET /api/v1/libraries``: the content-addressed content the caller's
        visible tracesets hold. ``params`` are the query's own names (``workspaceId``,
        ``scope``, ``search``, ``sort``, ``limit``, ``createdAfter``, ``createdBefore``)."""
        query = [(name, str(value)) for name, value in params.items()]
        if cursor:
            query.append(("next", cursor))
        response = self._call("GET", LIBRARIES, params=query)
        return answer(response, schemas.LibraryPage)

    def get_library(self, reference: str) -> schemas.Library:
        """A library by its ``lib_`` id or a hex content-hash prefix of 8 or more characters
        (a prefix that matches several raises ``MultipleChoices`` naming them)."""
        response = self._call("GET", f"{LIBRARIES}/{segment(reference)}")
        return answer(response, schemas.Library)

    def download_url(
        self,
        traceset_id: str,
        file: str | None = None,
        *,
        ranks: str | None = None,
        supporting: bool = False,
    ) -> schemas.DownloadAnswer:
        """A presigned URL for one file, or for a ZIP of every file when ``file`` is None,
        or of the files of ``ranks`` (``"0-7,12"``, plus the supporting files when
        ``supporting``) with a ``_tracestore/manifest.json``."""
        params: list[tuple[str, str]] | None = [("file", file)] if file is not None else None
        if ranks is not None:
            params = [("ranks", ranks)] + ([("supporting", "true")] if supporting else [])
        response = self._call("GET", f"{API}/{segment(traceset_id)}/download", params=params)
        return answer(response, schemas.DownloadAnswer)

    # --- uploads, low level ---

    def start_upload(self, request: schemas.TracesetUploadUrlRequest) -> schemas.UploadUrlResponse:
        """``POST /api/v1/tracesets/upload-url``: create the traceset, get part URLs."""
        body = schemas.wire_dict(request, exclude_none=True)
        response = self._call("POST", f"{API}/upload-url", body=body, idempotent=False)
        return answer(response, schemas.UploadUrlResponse)

    def check_upload(self, request: schemas.TracesetUploadUrlRequest) -> schemas.UploadCheckAnswer:
        """``POST /api/v1/tracesets/upload-url/check``: upload-url's checks of ``request``
        without creating anything; raises the error upload-url would. Safe to retry."""
        body = schemas.wire_dict(request, exclude_none=True)
        response = self._call("POST", f"{API}/upload-url/check", body=body)
        return answer(response, schemas.UploadCheckAnswer)

    def resume_upload(
        self, upload_id: str, file: str | None = None, from_part: int = 1
    ) -> schemas.UploadSessionResponse:
        """``GET /api/v1/tracesets/upload-url/{id}``: parts received, fresh URLs for the
        first parts missing (a page); with ``file``, that file's from ``from_part`` on."""
        params = [("file", file), ("fromPart", str(from_part))] if file is not None else None
        response = self._call("GET", f"{API}/upload-url/{segment(upload_id)}", params=params)
        return answer(response, schemas.UploadSessionResponse)

    def complete_upload(
        self,
        upload_id: str,
        etags: Mapping[str, Mapping[int, str]],
        sha256: Mapping[str, str] | None = None,
    ) -> schemas.Traceset:
        """``POST .../upload-url/complete`` with every part's ETag per file name and, per
        file name in ``sha256``, the file's hex SHA-256 for the service to verify. Safe to
        retry: a completed session answers the same traceset again."""
        files: list[dict[str, Any]] = []
        for name, parts in etags.items():
            entry: dict[str, Any] = {
                "name": name,
                "parts": [{"partNumber": n, "etag": e} for n, e in sorted(parts.items())],
            }
            if sha256 and name in sha256:
                entry["sha256"] = sha256[name]
            files.append(entry)
        body = {"uploadId": upload_id, "files": files}
        deadline = time.monotonic() + 3600
        while True:
            try:
                response = self._call(
                    "POST", f"{API}/upload-url/complete", body=body, timeout=COMPLETE_TIMEOUT
                )
            except Conflict:
                # Our own earlier attempt (cut off by a network error) may still be running.
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                continue
            return answer(response, schemas.Traceset)
