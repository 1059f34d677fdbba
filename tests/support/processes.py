"""Stopping the server processes tests start (asked politely first, then killed), and telling
whether one has ended."""

from __future__ import annotations

import subprocess
from pathlib import Path


def stop_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``process`` and wait ``timeout`` seconds for it; kill it if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def exited(pid: int) -> bool:
    """Whether process ``pid`` (a child not yet waited for) has ended: gone, or a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # (reaped, or gone while read)
        return True
