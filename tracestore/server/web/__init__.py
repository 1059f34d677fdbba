"""The web page's files: one HTML shell and the ES modules and stylesheet it loads.

They are served by the service itself (``/`` and ``/static``), never from a CDN: an
air-gapped cluster has none. There is no build step; the files here are what the browser runs.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_URL = "/static"
