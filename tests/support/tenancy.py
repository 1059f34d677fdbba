"""Test helpers: people in tenants and workspaces, and ready tracesets uploaded over HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select

from tracestore.server import auth, db
from tracestore.server.services import Services

UPLOAD_URL = "/api/v1/tracesets/upload-url"
COMPLETE_URL = "/api/v1/tracesets/upload-url/complete"
RANKS_256 = {"parallelism": {"dp": 32, "tp": 8, "pp": 1}, "shape": {"rankCount": 256}}


@dataclass(frozen=True)
class Person:
    """A user with an API token, for ``headers=person.auth``."""

    user_id: str
    tenant_id: str
    workspace_ids: tuple[str, ...]
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def tenant_id(services: Services, name: str) -> str:
    """The tenant called ``name``, created if needed."""
    with services.db.session() as session:
        found = session.scalar(select(db.Tenant.id).where(db.Tenant.name == name))
        if found is not None:
            return found
        return auth.create_tenant(session, name, services.now()).id


def workspace_id(services: Services, tenant: str, name: str) -> str:
    """The workspace called ``name`` in tenant ``tenant`` (an id), created if needed."""
    with services.db.session() as session:
        found = session.scalar(
            select(db.Workspace.id).where(
                db.Workspace.tenant_id == tenant, db.Workspace.name == name
            )
        )
        if found is not None:
            return found
        return auth.create_workspace(session, tenant, name, services.now()).id


def person(
    services: Services,
    name: str,
    tenant: str,
    workspaces: list[str],
    *,
    admin: bool = False,
) -> Person:
    """A new user of tenant ``tenant`` (a name), member of ``workspaces`` (names)."""
    tid = tenant_id(services, tenant)
    wids = [workspace_id(services, tid, w) for w in workspaces]
    with services.db.session() as session:
        user = auth.create_user(
            session, tid, name, services.now(), workspace_ids=wids, is_tenant_admin=admin
        )
        issued = auth.issue_token(session, user.id, f"{name} (test)", services.now())
    return Person(user.id, tid, tuple(wids), issued.token)


def start_upload(
    http: httpx.Client,
    metadata: Any = None,
    *,
    files: dict[str, bytes] | None = None,
    role: str = "primary",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """``upload-url`` for ``files`` (of ``role``, default one small file); the answer as JSON.

    ``metadata`` may be a JSON text (sent exactly as written) or a value."""
    files = {"rank_0.json": b'{"traceEvents": []}'} if files is None else files
    body: dict[str, Any] = {
        "name": extra.pop("name", "promotion test"),
        "files": [{"name": n, "size": len(data), "role": role} for n, data in files.items()],
        **extra,
    }
    text = json.dumps(body)
    if metadata is not None:
        metadata_text = metadata if isinstance(metadata, str) else json.dumps(metadata)
        text = text[:-1] + f', "workloadMetadata": {metadata_text}}}'
    answer = http.post(
        UPLOAD_URL,
        content=text.encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def send_parts(http: httpx.Client, answer: dict[str, Any], files: dict[str, bytes]) -> Any:
    """PUT every part; the ``files`` member of a complete request."""
    out = []
    for entry in answer["files"]:
        data, parts = files[entry["name"]], []
        for part in entry["parts"]:
            offset = (part["partNumber"] - 1) * answer["partSize"]
            sent = http.put(part["url"], content=data[offset : offset + part["size"]])
            assert sent.status_code == 200, sent.text
            parts.append({"partNumber": part["partNumber"], "etag": sent.headers["etag"]})
        out.append({"name": entry["name"], "parts": parts})
    return out


def upload_ready(
    http: httpx.Client,
    metadata: Any = None,
    *,
    role: str = "primary",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Upload one small file of ``role`` with ``metadata`` and complete it: the traceset JSON,
    with the upload id under ``"uploadId"``."""
    files = {"rank_0.json": b'{"traceEvents": []}'}
    answer = start_upload(http, metadata, files=files, role=role, headers=headers, **extra)
    body = {"uploadId": answer["uploadId"], "files": send_parts(http, answer, files)}
    done = http.post(COMPLETE_URL, json=body, headers=headers)
    assert done.status_code == 201, done.text
    return {**done.json(), "uploadId": answer["uploadId"], "completeBody": body}
