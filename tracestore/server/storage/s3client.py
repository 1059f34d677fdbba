"""Talking to an S3-compatible object store: the boto3 client as the S3 store configures it, the
error codes S3 answers with, how long a presigned URL may live, the bucket check that says what
to fix, and one object read as a seekable file (``s3blobs.py`` holds the store itself)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from tracestore.errors import ServiceUnavailable

MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # the SigV4 limit


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_missing(exc: ClientError) -> bool:
    return error_code(exc) in ("404", "NoSuchKey", "NotFound")


def expires_in(expires_at: datetime) -> int:
    seconds = int((expires_at - datetime.now(UTC)).total_seconds())
    return max(1, min(MAX_PRESIGN_SECONDS, seconds))


def s3_client(endpoint_url: str | None) -> Any:
    """A boto3 S3 client for ``endpoint_url`` (AWS itself when None); credentials and region
    from the AWS settings."""
    config = Config(
        signature_version="s3v4",
        # Other S3-compatible stores rarely serve virtual-hosted bucket names.
        s3={"addressing_style": "path" if endpoint_url else "auto"},
        # The newer default checksums are refused by several S3-compatible stores.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"mode": "standard"},
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)


def check_bucket(client: Any, bucket: str, prefix: str, *, probe: str, write: bool) -> None:
    """Raise ServiceUnavailable naming what to fix (the credentials, the bucket, the
    endpoint) unless ``bucket`` answers, and with ``write`` puts and deletes the object
    ``probe``."""
    where = f"s3://{bucket}/{prefix}".rstrip("/")
    endpoint = client.meta.endpoint_url
    try:
        client.head_bucket(Bucket=bucket)
        if write:
            client.put_object(Bucket=bucket, Key=probe, Body=b"ok")
            client.delete_object(Bucket=bucket, Key=probe)
    except NoCredentialsError:
        raise ServiceUnavailable(
            f"no S3 credentials for {where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance role)"
        ) from None
    except ClientError as exc:
        code = error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            message = (
                f"the bucket {bucket!r} does not exist at {endpoint}: create it, "
                "or name an existing one in TRACESTORE_BLOB_URL"
            )
        elif code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            action = "write to" if write else "read"
            message = (
                f"the S3 credentials may not {action} {where} ({code}): check "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's policy"
            )
        else:
            message = f"the S3 store at {endpoint} refused {where}: {code} {exc}"
        raise ServiceUnavailable(message) from None
    except BotoCoreError as exc:
        raise ServiceUnavailable(
            f"cannot reach the S3 store at {endpoint} ({type(exc).__name__}): "
            "set TRACESTORE_S3_ENDPOINT_URL to its address"
        ) from None


class ObjectReader(io.RawIOBase):
    """A seekable read-only view of one object: sequential reads stream one GET, and a
    seek elsewhere opens a ranged GET at the new position (ZIP inspection seeks)."""

    def __init__(self, client: Any, bucket: str, key: str, size: int) -> None:
        super().__init__()
        self._client = client
        self._bucket = bucket
        self._key = key
        self._size = size
        self._pos = 0
        self._body: Any = None
        self._body_pos = -1

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self._size or not len(view):
            return 0
        if self._body is None or self._body_pos != self._pos:
            self._drop_body()
            answer = self._client.get_object(
                Bucket=self._bucket, Key=self._key, Range=f"bytes={self._pos}-"
            )
            self._body, self._body_pos = answer["Body"], self._pos
        data = self._body.read(len(view))
        view[: len(data)] = data
        self._pos += len(data)
        self._body_pos += len(data)
        return len(data)

    def _drop_body(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None

    def close(self) -> None:
        self._drop_body()
        super().close()
