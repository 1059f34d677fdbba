"""The same upload into a peer: ``tracestore upload`` versus MLflow's artifact proxy
(``mlflow server --serve-artifacts`` + ``mlflow.log_artifacts``) of the same 8 × 64 MiB, in
one run, each into its own server on this machine.

    python3 -m venv .bench-mlflow && .bench-mlflow/bin/pip install 'mlflow>=3'   # once
    .venv/bin/python bench/peer_mlflow.py                     # 8 × 64 MiB, 3 runs each
    .venv/bin/python bench/peer_mlflow.py --scale 0.125 --repeat 1   # quick

MLflow is not a dependency of tracestore: it runs from its own virtual environment (the
``--mlflow-python`` interpreter), so neither pins the other's packages. Prints the median
seconds of each, and MLflow's time over ours (the issue's target: above 3). What each side
promises differs, and the figures say so: tracestore verifies a SHA-256 of every part and
file and inspects the traces; MLflow checks no checksum. After each MLflow run the stored
artifacts are hashed here, so a fast answer that lost bytes cannot pass.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from guest import memory_note
from served import Server, free_port
from upload import MIB, Case, run_cli, settle, write_files

from tracestore.client.local_files import sha256_of

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MLFLOW_PYTHON = REPO / ".bench-mlflow" / "bin" / "python"

LOG_ARTIFACTS = """
import sys, time
import mlflow
url, source = sys.argv[1], sys.argv[2]
mlflow.set_tracking_uri(url)
start = time.perf_counter()
with mlflow.start_run() as run:
    mlflow.log_artifacts(source)
print(run.info.run_id, run.info.experiment_id, time.perf_counter() - start)
"""


class MlflowServer:
    """``mlflow server --serve-artifacts`` on a free port, artifacts in ``root/artifacts``."""

    def __init__(self, python: Path, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = root / "artifacts"
        self.log = open(root / "mlflow.log", "wb")  # noqa: SIM115
        command = [
            *(str(python), "-m", "mlflow", "server", "--serve-artifacts"),
            *("--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"),
            *("--artifacts-destination", str(self.artifacts)),
        ]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"mlflow server did not start; see {self.log.name}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def digests(directory: Path) -> dict[str, str]:
    return {path.name: sha256_of(path) for path in sorted(directory.iterdir())}


def run_mlflow(python: Path, server: MlflowServer, source: Path, expected: dict[str, str]) -> float:
    settle()
    start = time.perf_counter()
    answer = subprocess.run(
        [str(python), "-c", LOG_ARTIFACTS, server.url, str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start  # the whole process, as ours is timed
    run_id, experiment_id, _ = answer.stdout.splitlines()[-1].split()  # after its banner
    stored = server.artifacts / experiment_id / run_id / "artifacts"
    if digests(stored) != expected:
        raise SystemExit(f"MLflow's stored artifacts under {stored} differ from the source")
    shutil.rmtree(stored)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply file sizes by this")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--mlflow-python", type=Path, default=DEFAULT_MLFLOW_PYTHON)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    args = parser.parse_args()
    if not args.mlflow_python.exists():
        raise SystemExit(
            f"no MLflow interpreter at {args.mlflow_python}: python3 -m venv .bench-mlflow && "
            ".bench-mlflow/bin/pip install 'mlflow>=3' (or pass --mlflow-python)"
        )

    case = Case("8 × 64 MiB", 8, int(64 * MIB * args.scale), 3.0, True)
    root = Path(tempfile.mkdtemp(prefix="tracestore-peer-", dir=args.workdir))
    source = root / "src"
    write_files(source, case)
    expected = digests(source)
    (root / "mlflow").mkdir()
    ours = Server(root / "data", env={"TRACESTORE_PART_SIZE": str(64 * MIB)})
    peer = MlflowServer(args.mlflow_python, root / "mlflow")
    ours_s: list[float] = []
    peer_s: list[float] = []
    try:
        for _ in range(args.repeat):
            ours_s.append(run_cli(ours, source, args.concurrency)["seconds"])
            peer_s.append(run_mlflow(args.mlflow_python, peer, source, expected))
    finally:
        ours.stop()
        peer.stop()
        shutil.rmtree(root, ignore_errors=True)

    total = case.files * case.size
    ours_median, peer_median = statistics.median(ours_s), statistics.median(peer_s)
    ratio = peer_median / ours_median
    verdict = "meets" if ratio > case.target else "BELOW"
    label = case.name if args.scale == 1 else f"{case.name} × {args.scale}"
    print(f"bench/peer_mlflow.py  {label}  repeat={args.repeat}  concurrency={args.concurrency}")
    if note := memory_note():
        print(note)
    print(
        f"tracestore upload {ours_median:6.2f} s ({total / ours_median / 1e6:7.1f} MB/s)   "
        f"mlflow.log_artifacts {peer_median:6.2f} s ({total / peer_median / 1e6:7.1f} MB/s)   "
        f"tracestore {ratio:.2f} × faster ({verdict} target > {case.target})"
    )
    print(
        json.dumps(
            {
                "case": label,
                "bytes": total,
                "tracestore_runs_s": ours_s,
                "mlflow_runs_s": peer_s,
                "ratio": round(ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
