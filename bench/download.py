"""Download throughput: a traceset out of a real ``tracestore serve``, as single files and as
the streamed ZIP archive, versus ``openssl dgst -sha256`` over the same blobs, in one run.

    .venv/bin/python bench/download.py                # 16 × 128 MiB (2 GiB), 3 runs each
    .venv/bin/python bench/download.py --scale 0.125  # quick: file sizes scaled down

Three ways out: single files with curl (presigned URLs, one after another), single files
with the project's own ``Client.download_traceset`` (SHA-256 verified while receiving,
written under /dev/shm), and the whole traceset as one streamed ZIP with curl. Beside the
``Client``, as a reference and not a target: the floor of a verified download on this
machine, the same URLs fetched by a bare loop (a socket's ``recv_into`` one reused buffer,
SHA-256, ``os.write`` to the same place, the same concurrency), which says how much of the
gap to ``openssl dgst`` is the client's and how much the copy into fresh page cache. curl writes
to /dev/null: the figures are the service's, not the disk's. The baseline hashes the very
blob files the server serves (page cache warm for all). Prints per mode the median MB/s, the
baseline's, their ratio against the mode's target (0.7 for curl's single files and the archive,
0.8 for the verified ``Client``, issue 16's) and the server's CPU seconds; for the archive
also the server's peak RSS (VmHWM, reset just before each archive) against the 200 MiB
budget. The first archive is also fetched to a file and unpacked with ``zipfile``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from guest import memory_note
from served import Server, cpu_seconds

from tracestore.client import Client

MIB = 1024 * 1024
TARGET = 0.7
CLIENT_TARGET = 0.8  # issue 16: the verified Client download against openssl dgst
RSS_BUDGET = 200 * MIB
SINGLE_CURL = "single files, curl > /dev/null"
SINGLE_CLIENT = "single files, Client.download_traceset (SHA-256 verified)"
ARCHIVE = "archive (zip64, stored), curl > /dev/null"
FLOOR = "single files, a bare recv_into + SHA-256 + os.write loop (reference)"
BARE_CHUNK = 1024 * 1024


def status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM (Linux: write 5 to clear_refs); False when not permitted."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def write_files(directory: Path, count: int, size: int) -> None:
    directory.mkdir(parents=True)
    for index in range(count):
        with open(directory / f"rank_{index:04d}.bin", "wb") as out:
            left = size
            while left:
                chunk = os.urandom(min(8 * MIB, left))
                out.write(chunk)
                left -= len(chunk)


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def baseline(blobs: list[str]) -> float:
    return timed(
        lambda: subprocess.run(
            ["openssl", "dgst", "-sha256", *blobs], check=True, stdout=subprocess.DEVNULL
        )
    )


def curl(urls: list[str], sink: str = os.devnull) -> int:
    """One curl process fetching each URL into ``sink``, one after another; bytes received."""
    args = [a for url in urls for a in ("-o", sink, "-w", "%{size_download}\\n", url)]
    done = subprocess.run(["curl", "-s", "--fail", *args], check=True, stdout=subprocess.PIPE)
    return sum(int(n) for n in done.stdout.split())


def bare_download(url: str, target: Path, size: int, sha256: str) -> None:
    """``url`` into ``target`` with as little as a verified download can do in Python: one
    GET on a fresh connection, its body received into one reused buffer, hashed and
    written; the size and hash checked at the end."""
    parts = urlparse(url)
    with socket.create_connection((parts.hostname, parts.port or 80)) as sock:
        query = f"?{parts.query}" if parts.query else ""
        head = f"GET {parts.path}{query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        sock.sendall((head + "Connection: close\r\n\r\n").encode())
        buffer = memoryview(bytearray(BARE_CHUNK))
        received = b""
        while b"\r\n\r\n" not in received:
            n = sock.recv_into(buffer)
            if not n:
                raise SystemExit(f"no answer from {url}")
            received += bytes(buffer[:n])
        header, _, first = received.partition(b"\r\n\r\n")
        if not header.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"{url} answered {header.splitlines()[0]!r}")
        digest = hashlib.sha256(first)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, first)
            have = len(first)
            while n := sock.recv_into(buffer):
                digest.update(buffer[:n])
                os.write(fd, buffer[:n])
                have += n
        finally:
            os.close(fd)
    if have != size or digest.hexdigest() != sha256:
        raise SystemExit(f"the bare download of {url} got {have} bytes hashing otherwise")


def check_archive(url: str, directory: Path, size: int, count: int) -> None:
    """Fetch the archive once more to a file and unpack it with zipfile (CRC-checked)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "all.zip"
    curl([url], str(target))
    with zipfile.ZipFile(target) as archive:
        assert archive.testzip() is None
        assert [i.file_size for i in archive.infolist()] == [size] * count
    target.unlink()


class RssSampler:
    """Samples the server's resident set every 20 ms while a download runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_bytes(self.pid, "VmRSS"))
            time.sleep(0.02)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply file sizes by this")
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--size-mib", type=float, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4, help="single-file downloads")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument(
        "--sink-dir",
        type=Path,
        default=None,
        help="where Client.download_traceset writes (default /dev/shm: measure the service, "
        "not the disk)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip unpacking the archive")
    args = parser.parse_args()

    size = int(args.size_mib * MIB * args.scale)
    total = args.files * size
    root = Path(tempfile.mkdtemp(prefix="tracestore-dlbench-", dir=args.workdir))
    sinks = args.sink_dir or (Path("/dev/shm") if Path("/dev/shm").is_dir() else root)
    server = Server(root / "data")
    pid = server.process.pid
    try:
        source = root / "src"
        write_files(source, args.files, size)
        with Client(server.url, server.token) as client:
            ts = client.upload_traceset(source, workload_metadata={"shape": {"rankCount": 1}})
            # Let the server's inspection of the new files finish before measuring.
            deadline = time.monotonic() + 600
            while any(f.metadata_status == "pending" for f in ts.files):
                if time.monotonic() > deadline:
                    raise SystemExit("inspection did not finish within 10 minutes")
                time.sleep(0.5)
                ts = client.get_traceset(ts.id)
            resolved = client.resolve_traceset(ts.id)
            blobs = [unquote(urlparse(f.uri).path) for f in resolved.files]
            shutil.rmtree(source)
            subprocess.run(["cat", *blobs], check=True, stdout=subprocess.DEVNULL)  # warm
            files = [f.name for f in ts.files]

            def single_curl(out: Path) -> None:
                urls = [client.download_url(ts.id, name).url for name in files]
                assert curl(urls) == total

            def single_client(out: Path) -> None:
                client.download_traceset(ts.id, out, concurrency=args.concurrency)

            def single_bare(out: Path) -> None:
                out.mkdir(parents=True)
                entries = [(f, client.download_url(ts.id, f.name).url) for f in ts.files]
                with ThreadPoolExecutor(args.concurrency) as pool:
                    done = [
                        pool.submit(bare_download, url, out / f.name, f.size, f.hash.split(":")[1])
                        for f, url in entries
                        if f.hash
                    ]
                assert len(done) == len(files)
                for future in done:
                    future.result()

            def archive_curl(out: Path) -> None:
                assert curl([client.download_url(ts.id).url]) > total

            modes: dict[str, Callable[[Path], None]] = {
                SINGLE_CURL: single_curl,
                SINGLE_CLIENT: single_client,
                FLOOR: single_bare,
                ARCHIVE: archive_curl,
            }
            runs: dict[str, list[float]] = {mode: [] for mode in modes}
            cpu: dict[str, float] = dict.fromkeys(modes, 0.0)
            own_cpu: dict[str, float] = dict.fromkeys(modes, 0.0)
            base_runs: list[float] = []
            peaks: list[int] = []
            idle: list[int] = []
            hwm_reset = True
            for run in range(args.repeat):
                base_runs.append(baseline(blobs))
                for mode, action in modes.items():
                    out = sinks / f"tracestore-dlbench-{os.getpid()}-{run}"
                    if mode == ARCHIVE:
                        idle.append(status_bytes(pid, "VmRSS"))
                        hwm_reset = reset_peak_rss(pid) and hwm_reset
                    before, own = cpu_seconds(pid), resource.getrusage(resource.RUSAGE_SELF)
                    with RssSampler(pid) as sampler:
                        runs[mode].append(timed(partial(action, out)))
                    cpu[mode] += cpu_seconds(pid) - before
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    own_cpu[mode] += after.ru_utime - own.ru_utime + after.ru_stime - own.ru_stime
                    if mode == ARCHIVE:
                        hwm = status_bytes(pid, "VmHWM") if hwm_reset else 0
                        peaks.append(max(sampler.peak, hwm))
                        if run == 0 and not args.no_verify:
                            check_archive(client.download_url(ts.id).url, out, size, len(files))
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    base_mbs = total / statistics.median(base_runs) / 1e6
    results = []
    for mode, times in runs.items():
        mbs = total / statistics.median(times) / 1e6
        result: dict[str, Any] = {
            "mode": mode,
            "case": f"{args.files} × {size // MIB} MiB",
            "bytes": total,
            "ours_MBps": round(mbs, 1),
            "baseline_MBps": round(base_mbs, 1),
            "ratio": round(mbs / base_mbs, 3),
            "target": {SINGLE_CLIENT: CLIENT_TARGET, FLOOR: None}.get(mode, TARGET),
            "runs_s": [round(t, 2) for t in times],
            "baseline_runs_s": [round(b, 2) for b in base_runs],
            "server_cpu_s_per_run": round(cpu[mode] / args.repeat, 2),
        }
        if mode in (SINGLE_CLIENT, FLOOR):
            result["client_cpu_s_per_run"] = round(own_cpu[mode] / args.repeat, 2)
        if mode == ARCHIVE:
            result["server_rss_before_MiB"] = round(max(idle) / MIB, 1)
            result["server_peak_rss_MiB"] = round(max(peaks) / MIB, 1)
            result["rss_budget_MiB"] = RSS_BUDGET // MIB
            result["peak_rss_source"] = (
                "VmHWM reset before each archive" if hwm_reset else "VmRSS sampled every 20 ms"
            )
        results.append(result)
    print(json.dumps(results, indent=2, ensure_ascii=False))
    for r in results:
        print(f"{r['mode']:<68} {r['ours_MBps']:7.1f} MB/s  ratio {r['ratio']:.3f}")
    by_mode = {r["mode"]: r for r in results}
    client, floor = by_mode[SINGLE_CLIENT]["ours_MBps"], by_mode[FLOOR]["ours_MBps"]
    print(f"Client.download_traceset / the bare loop: {client / floor:.3f}")
    if note := memory_note():
        print(note)


if __name__ == "__main__":
    main()
