"""Refusing to start (or to administer) with one line that names what to fix: `migrate` is a
separate idempotent step, admin commands make no store by accident (unless `--init`), `serve`
refuses without S3 credentials, its bucket, its S3 endpoint or its database, and /readyz names
the failing dependency. Real `tracestore serve` processes on PostgreSQL and S3 (moto)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tests.support.envelopes import assert_error
from tests.support.ports import free_port
from tests.support.replica_processes import (  # noqa: F401 - the postgres and s3 fixtures
    bucket_replica_env,
    fresh_database,
    newest_revision,
    postgres,
    refusal,
    replica_env,
    replicas,
    s3,
)
from tests.support.s3server import AWS_ENV, MotoServer
from tracestore.cli import main
from tracestore.server.db.database import schema_exists

pytestmark = pytest.mark.slow  # serve processes on PostgreSQL and S3

# --- migrate, and admin commands that do not make a store by accident ---


def test_migrate_is_a_separate_idempotent_step(tmp_path: Path) -> None:
    newest = newest_revision()
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(main, ["migrate", "--data-dir", str(tmp_path / "data")])
        assert result.exit_code == 0, result.output
        assert f"is at schema revision {newest}" in result.output
    assert schema_exists(f"sqlite:///{tmp_path / 'data' / 'tracestore.db'}")


def test_an_admin_command_pointed_at_no_store_refuses_and_creates_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["token", "list", "--data-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"No tracestore store at sqlite:///{(tmp_path / 'nowhere').resolve()}" in line
    assert "--init" in line
    assert not (tmp_path / "nowhere").exists()


def test_init_creates_the_store_and_then_the_commands_use_it(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    assert runner.invoke(main, ["tenant", "list", *data, "--init"]).exit_code == 0
    listed = runner.invoke(main, ["tenant", "list", *data])
    assert listed.exit_code == 0 and "default" in listed.output


def test_an_admin_command_names_a_postgres_database_without_a_store(
    postgres: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    url = fresh_database(postgres)
    env = {"TRACESTORE_DATABASE_URL": url}
    result = CliRunner().invoke(main, ["user", "list", "--data-dir", str(tmp_path)], env=env)
    assert result.exit_code == 1
    assert f"No tracestore store at {url} (from TRACESTORE_DATABASE_URL)" in result.output
    assert not schema_exists(url)


# --- refusing to start, with one line that names what to fix ---


def s3_env(
    s3: MotoServer,  # noqa: F811
    bucket: str,
    tmp_path: Path,
    **extra: str,
) -> dict[str, str]:
    return replica_env(
        TRACESTORE_BLOB_URL=f"s3://{bucket}/ts",
        TRACESTORE_S3_ENDPOINT_URL=s3.endpoint_url,
        # Nothing else on this machine may lend boto3 credentials.
        HOME=str(tmp_path),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
        **extra,
    )


def test_serve_without_s3_credentials_refuses_to_start(
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    line = refusal(tmp_path, s3_env(s3, s3.new_bucket(), tmp_path))
    assert line.startswith("Error: Cannot start: blob store: no S3 credentials for s3://")
    assert "AWS_ACCESS_KEY_ID" in line


def test_serve_with_a_missing_bucket_refuses_to_start(
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    credentials = {k: v for k, v in AWS_ENV.items() if "KEY" in k or "TOKEN" in k}
    line = refusal(tmp_path, s3_env(s3, "no-such-bucket", tmp_path, **credentials))
    assert "the bucket 'no-such-bucket' does not exist" in line
    assert "TRACESTORE_BLOB_URL" in line


def test_serve_with_an_unreachable_s3_endpoint_refuses_to_start(tmp_path: Path) -> None:
    env = replica_env(
        TRACESTORE_BLOB_URL="s3://bucket/ts",
        TRACESTORE_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
        **AWS_ENV,
    )
    line = refusal(tmp_path, env)
    assert "cannot reach the S3 store at http://127.0.0.1:" in line
    assert "TRACESTORE_S3_ENDPOINT_URL" in line


def test_serve_with_an_unreachable_database_refuses_to_start(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://tracestore:secret@127.0.0.1:{free_port()}/traces"
    line = refusal(tmp_path, replica_env(TRACESTORE_DATABASE_URL=url))
    assert line.startswith(
        "Error: Cannot use the database postgresql+psycopg://tracestore:***@127.0.0.1:"
    )
    assert "(TRACESTORE_DATABASE_URL)" in line and "secret" not in line


def test_readyz_names_the_failing_dependency_and_why(
    postgres: str,  # noqa: F811
    s3: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    bucket = s3.new_bucket()
    env = bucket_replica_env(
        fresh_database(postgres),
        s3,
        bucket,
    )
    with replicas(tmp_path, env, count=1) as (replica,):
        s3.client().delete_bucket(Bucket=bucket)
        answer = httpx.get(f"{replica.url}/readyz", timeout=30)
    message = assert_error(answer, 503, "SERVICE_UNAVAILABLE")["message"]
    assert message == (
        f"Not ready: blob store: the bucket {bucket!r} does not exist at {s3.endpoint_url}: "
        "create it, or name an existing one in TRACESTORE_BLOB_URL"
    )
