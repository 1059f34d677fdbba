"""What ``tracestore serve`` logs: uvicorn's own logging, with the signature of every
presigned URL in the access log replaced (``presigned.redacted``)."""

from __future__ import annotations

import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG

from tracestore.server.presigned import redacted


class RedactSignatures(logging.Filter):
    """Rewrites an access-log record's path (uvicorn logs ``client, method, path with
    query, http version, status``) so it carries no signature."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (*args[:2], redacted(args[2]), *args[3:])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration (``uvicorn.run(log_config=...)``) with the access
    log's handler redacting signatures; a dict, so worker processes apply it too."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_signatures"] = {"()": RedactSignatures}
    config["handlers"]["access"].setdefault("filters", []).append("redact_signatures")
    return config
