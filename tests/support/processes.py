"""Stopping the server processes tests start: asked politely first, then killed."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``process`` and wait ``timeout`` seconds for it; kill it if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
