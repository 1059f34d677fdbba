"""``python -m tracestore.cli``: the ``tracestore`` command."""

from __future__ import annotations

from tracestore.cli import run

run()
