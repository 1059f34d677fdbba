"""The Python client: ``Client`` (one typed method per route), the uploader and downloader it
drives, and the transports that move the bytes. It imports no server dependency.

    from tracestore.client import Client
"""

from __future__ import annotations

from tracestore.client.client import Client, MetadataWarning
from tracestore.client.retries import RetryPolicy, RetryWait
from tracestore.client.transfers import ProgressCallback, ProgressEvent, UploadInterrupted

__all__ = [
    "Client",
    "MetadataWarning",
    "ProgressCallback",
    "ProgressEvent",
    "RetryPolicy",
    "RetryWait",
    "UploadInterrupted",
]
