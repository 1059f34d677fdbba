"""A real S3-protocol server for tests: moto's server in a subprocess on 127.0.0.1.

``MotoServer`` starts ``moto_server`` on a free port, waits until it answers and gives its
endpoint URL; ``new_bucket`` makes an empty bucket on it, so tests never share state.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.processes import stop_process
from tracestore.server.settings import Settings

# moto accepts any credentials; the tests give these to boto3 through the environment.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class S3Unavailable(RuntimeError):
    """The S3-protocol test server could not be started."""


class MotoServer:
    """Start with ``start()`` (or ``with``); ``endpoint_url`` is where it listens. ``env``
    adds moto's own settings to its environment."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env or {}  # moto's own settings (MOTO_DISABLE_GLOBAL_CORS ...)
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._client: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        executable = Path(sys.executable).with_name("moto_server")
        command = (
            [str(executable)] if executable.exists() else [sys.executable, "-m", "moto.server"]
        )
        self.port = free_port()
        # A file, not a pipe: moto logs every request, and a full pipe would stall it.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._process = subprocess.Popen(
            [*command, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env={**os.environ, **AWS_ENV, **self.env},
        )
        deadline = time.monotonic() + 30
        with httpx.Client(trust_env=False, timeout=2) as http:
            while True:
                if self._process.poll() is not None:
                    self._log.seek(0)
                    error = self._log.read().decode(errors="replace")
                    self.stop()
                    raise S3Unavailable(f"moto_server exited: {error[-2000:]}")
                try:
                    http.get(f"{self.endpoint_url}/moto-api/")
                    return self
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise S3Unavailable("moto_server did not answer within 30 s") from None
                    time.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process, timeout=10)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def client(self) -> Any:
        """A boto3 S3 client on this server (made once: making one takes a while)."""
        import boto3

        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
                region_name=AWS_ENV["AWS_DEFAULT_REGION"],
            )
        return self._client

    def new_bucket(self) -> str:
        """Create an empty bucket with a fresh name; its name."""
        name = "ts-" + secrets.token_hex(8)
        self.client().create_bucket(Bucket=name)
        return name

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def with_s3_bytes(
    settings: Settings, server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """``settings`` with the bytes in a fresh bucket of ``server``, the AWS settings (moto's
    test credentials and region) in the environment as a deployment would have them."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    bucket = server.new_bucket()
    return settings.model_copy(
        update={"blob_url": f"s3://{bucket}/tracestore", "s3_endpoint_url": server.endpoint_url}
    )
