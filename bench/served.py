"""A real ``tracestore serve`` for the benchmarks: a free port, its own data directory,
the bootstrap admin token, stopped when the benchmark ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``tracestore serve`` on a free port; its log is ``<data_dir>-server.log`` beside
    ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        env: Mapping[str, str] = {},
        args: Sequence[str] = (),
        python: Sequence[str] = (sys.executable,),
    ) -> None:
        """``python``: the interpreter (and its options) that runs ``-m tracestore.cli``;
        ``env`` is added to this process's environment."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(data_dir.parent / f"{data_dir.name}-server.log", "wb")  # noqa: SIM115
        command = [*python, "-m", "tracestore.cli", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--data-dir", str(data_dir), *args],
            env={**os.environ, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise SystemExit(f"the server did not start; see {self.log.name}")
        self.token = (data_dir / "admin-token").read_text().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process and its live descendants (``serve --workers N``
    forks N), from /proc: less sensitive than requests/s to what else the machine runs."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return total
