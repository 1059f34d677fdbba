"""A real ``tracestore serve`` for tests: started on a free port over a data directory,
waited on until it answers, stopped at the end; and ``tracestore`` commands run against it."""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.ports import free_port

MIB = 1024 * 1024
PART = 5 * MIB


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    env: dict[str, str]
    pid: int = 0  # the server process (a test may SIGKILL it)

    def api(self) -> httpx.Client:
        """An HTTP client on the service, authenticated as its admin."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )


@contextmanager
def serving(
    data_dir: Path,
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    port: int | None = None,
    open_files: int | None = None,
    measured: bool = True,
) -> Iterator[Served]:
    """``tracestore serve`` on ``port`` (a free one by default) over ``data_dir``, stopped at
    the end; with ``cwd``, started there without --data-dir (``data_dir`` is then its default
    one); ``env`` adds to its environment; ``open_files`` limits its descriptors (soft and
    hard). ``measured=False`` keeps coverage out of the server and of the commands run with
    ``Served.env``: for tests whose worth is volume or chance (fuzzing, crash rounds, load),
    which coverage slows two to three times and which reach no line the others miss."""
    port = port or free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("TRACESTORE_")}
    if not measured:
        base_env = unmeasured(base_env)
    base_env["TRACESTORE_PART_SIZE"] = str(PART)
    log = open(data_dir.parent / "server.log", "wb")  # noqa: SIM115
    command = [sys.executable, "-m", "tracestore.cli", "serve", "--port", str(port)]
    if cwd is None:
        command += ["--data-dir", str(data_dir)]
    server = subprocess.Popen(
        [*command, *args],
        env={**base_env, **(env or {})},
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=None if open_files is None else lambda: _limit_open_files(open_files),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((data_dir.parent / "server.log").read_text())
            time.sleep(0.1)
        token = (data_dir / "admin-token").read_text().strip()
        client_env = {**base_env, "TRACESTORE_URL": url, "TRACESTORE_TOKEN": token}
        yield Served(url, token, client_env, server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def unmeasured(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what makes coverage (``[tool.coverage.run] patch``) measure a process."""
    return {k: v for k, v in env.items() if not k.startswith("COVERAGE_")}


def _limit_open_files(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def tracestore(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracestore.cli", *args],
        env=served.env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_traces(directory: Path, sizes: list[int]) -> dict[str, bytes]:
    directory.mkdir(parents=True)
    files = {f"rank_{i}.json": os.urandom(size) for i, size in enumerate(sizes)}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


def write_meta(path: Path, ranks: int) -> Path:
    path.write_text(json.dumps({"shape": {"rankCount": ranks}, "precision": "bf16"}))
    return path


def assert_downloaded(served: Served, traceset_id: str, out: Path, files: dict[str, bytes]) -> None:
    result = tracestore(served, "download", traceset_id, "-o", str(out))
    assert result.returncode == 0, result.stderr
    for name, data in files.items():
        assert (out / name).read_bytes() == data


def start_upload(
    served: Served, traces: Path, meta: Path, *options: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``tracestore upload`` (one part at a time, with ``options``) as a process; it and its
    upload id, read from the line it prints once the session exists."""
    command = [sys.executable, "-m", "tracestore.cli", "upload", *options, str(traces)]
    process = subprocess.Popen(
        [*command, "--workload-metadata", str(meta), "--concurrency", "1"],
        env=env or served.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    # Random bytes have no rank: the local inspection warns first, then the session starts.
    line = process.stderr.readline()
    while line.startswith("Warning:"):
        line = process.stderr.readline()
    assert f"resume with: {shlex.join(['tracestore', 'upload', *options])} --resume upload_" in line
    return process, line.split("--resume ")[1].split()[0]
