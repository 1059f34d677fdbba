"""The access log ``serve`` writes (``accesslog.py``): flushed in batches by its own
thread and completely at close, its lines uvicorn's own without presigned signatures."""

from __future__ import annotations

import io
import logging
import time

import pytest
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

from tracestore.server.serving.access_log import (
    FLUSH_EVERY,
    AccessFormatter,
    AccessLogHandler,
    RedactSignatures,
    log_config,
)


def test_the_access_log_is_flushed_in_batches_and_completely() -> None:
    class Stream(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1
            super().flush()

    stream = Stream()
    handler = AccessLogHandler(stream)
    logger = logging.getLogger("tracestore-test-access")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for n in range(200):
            logger.warning("GET /x/%d", n)
        deadline = time.monotonic() + 10 * FLUSH_EVERY + 5
        while stream.flushes == 0 and time.monotonic() < deadline:
            time.sleep(FLUSH_EVERY / 4)
        assert 1 <= stream.flushes <= 5  # not one per line
        logger.warning("GET /last")
    finally:
        logger.removeHandler(handler)
        handler.close()
    lines = stream.getvalue().splitlines()
    assert lines == [f"GET /x/{n}" for n in range(200)] + ["GET /last"]


@pytest.mark.parametrize("colors", [False, True])
def test_the_access_lines_are_uvicorns_without_signatures(colors: bool) -> None:
    """Our access formatter skips uvicorn's record copies, not a character of its line."""
    fmt = log_config()["formatters"]["access"]["fmt"]
    ours = AccessFormatter(fmt, use_colors=colors)
    theirs = UvicornAccessFormatter(fmt, use_colors=colors)
    signed = "/blobs/content/ab?expires=1&signature=s3cr3t&x=1"
    for args in [
        ("127.0.0.1:5555", "GET", "/api/v1/tracesets/ts_1", "1.1", 200),
        ("[::1]:80", "PUT", signed, "1.1", 404),
        ("", "POST", "/api/v1/tracesets?limit=2", "1.0", 599),
    ]:
        message = '%s - "%s %s HTTP/%s" %d'  # as uvicorn's protocol logs it
        record = logging.LogRecord("uvicorn.access", logging.INFO, "p", 1, message, args, None)
        RedactSignatures().filter(record)
        assert ours.format(record) == theirs.format(record)
        assert "s3cr3t" not in ours.format(record)
