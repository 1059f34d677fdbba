"""What ``tracestore serve`` logs: uvicorn's own logging, with the signature of every
presigned URL in the access log replaced (``presigned.redacted``), and the access log
written without a system call per request (``AccessLogHandler``)."""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any, TextIO

from uvicorn._ansi import style as ansi_style
from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

from tracestore.server.presigned import redacted


class RedactSignatures(logging.Filter):
    """Rewrites an access-log record's path (uvicorn logs ``client, method, path with
    query, http version, status``) so it carries no signature."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (*args[:2], redacted(args[2]), *args[3:])
        return True


class AccessFormatter(UvicornAccessFormatter):
    """uvicorn's access-line formatter, writing the same line without copying the record:
    its ``formatMessage`` and its parent's each ``copy.copy`` it, two fifths of the ~20 us
    a line cost. Anything but uvicorn's own five-argument record with a plain %-format
    (and no ``color_message``) goes to uvicorn's code as before."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        args, style = record.args, self._style
        if (
            type(style) is not logging.PercentStyle
            or style._defaults  # type: ignore[attr-defined]
            or not isinstance(args, tuple)
            or len(args) != 5
            or "color_message" in record.__dict__
        ):
            return super().formatMessage(record)
        client_addr, method, full_path, http_version, status_code = args
        levelname = record.levelname
        separator = " " * (8 - len(levelname))
        request_line = f"{method} {full_path} HTTP/{http_version}"
        if self.use_colors:
            levelname = self.color_level_name(levelname, record.levelno)
            request_line = ansi_style(request_line, bold=True)
        values = dict(record.__dict__)
        values["levelprefix"] = levelname + ":" + separator
        values["client_addr"] = client_addr
        values["request_line"] = request_line
        values["status_code"] = self.get_status_code(int(status_code))  # type: ignore[call-overload]
        return style._fmt % values


# How long an access-log line may wait in the stream's buffer.
FLUSH_EVERY = 0.2


class AccessLogHandler(logging.StreamHandler[TextIO]):
    """uvicorn's access-log handler, except that a record is written into the stream's
    buffer and the stream is flushed by a thread of its own at most every FLUSH_EVERY
    seconds: a flush per line was a write(2) per request, with the GIL given up and fought
    for again each time. ``close`` (logging's shutdown) flushes what is left."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._unflushed = threading.Event()
        self._flusher: threading.Thread | None = None

    def flush(self) -> None:
        # emit() calls this after every record: leave it to the flusher (woken once, not
        # once per record: Event.set takes its lock and notifies every time).
        if not self._unflushed.is_set():
            self._unflushed.set()
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_periodically, name="tracestore-access-log", daemon=True
            )
            self._flusher.start()

    def _flush_periodically(self) -> None:
        while True:
            self._unflushed.wait()
            time.sleep(FLUSH_EVERY)
            self._unflushed.clear()
            super().flush()

    def close(self) -> None:
        super().flush()
        super().close()


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration (``uvicorn.run(log_config=...)``) with the access
    log's handler redacting signatures and buffering, and its cheaper formatter; a dict, so
    worker processes apply it too."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.{AccessFormatter.__name__}"
    config.setdefault("filters", {})["redact_signatures"] = {"()": RedactSignatures}
    access = config["handlers"]["access"]
    access["class"] = f"{__name__}.{AccessLogHandler.__name__}"
    access.setdefault("filters", []).append("redact_signatures")
    return config
