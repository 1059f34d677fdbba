"""HTTP routes for listing (see the owning use-case module)."""

from __future__ import annotations

from fastapi import APIRouter

from tracestore.server.routes import ERROR_RESPONSES

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)
