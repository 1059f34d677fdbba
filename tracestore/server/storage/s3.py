"""S3BlobStore: the store protocols (``StagingArea``, ``ContentStore``, ``BlobStore``) on any
S3-compatible object store.

Each staged file is one S3 multipart upload on ``<prefix>/staging/<upload>/<position>``; the
client PUTs its parts straight to presigned ``UploadPart`` URLs, so bytes never pass through
the service. ``seal_file`` completes the multipart upload and hashes the assembled object;
``place_file`` copies it server-side to ``<prefix>/blobs/<sha256[:2]>/<sha256>``.

A completion may be cut off anywhere and retried. S3 forgets a multipart upload's parts once
it is completed, so before completing, the part list is written to a small manifest object
beside the staged one (``<position>.json``), and the SHA-256 is added to it once known: a
retry then answers ``list_parts`` and ``seal_file`` from the manifest.

What talking to S3 takes besides (the client's configuration, S3's error codes, presigned
URLs' lifetime, the bucket check, an object read as a seekable file) is in ``s3client.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any, BinaryIO
from urllib.parse import urlparse, urlsplit

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from tracestore.errors import ValidationError
from tracestore.server.storage.blobs import (
    CHUNK,
    SHA256_HEX,
    UPLOAD_ID,
    CommittedBlob,
    FileLargerThanDeclared,
    StagedFile,
    StoredPart,
    content_disposition,
    normalise_etag,
)
from tracestore.server.storage.s3client import (
    ObjectReader,
    check_bucket,
    error_code,
    expires_in,
    is_missing,
    s3_client,
)

HEARTBEAT_BYTES = 256 * 1024 * 1024
HEARTBEAT_SECONDS = 10.0


class S3BlobStore:
    """Blobs in an S3 bucket under a key prefix; part and download URLs are S3 presigned URLs."""

    list_page_size = 1000

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        # Single-request CopyObject stops at 5 GiB; above the threshold the copy goes by parts.
        self.copy_config = TransferConfig(
            multipart_threshold=1024 * 1024 * 1024, multipart_chunksize=256 * 1024 * 1024
        )

    @classmethod
    def from_url(cls, url: str, *, endpoint_url: str | None = None) -> S3BlobStore:
        """A store for ``s3://bucket/prefix``; credentials and region from the AWS settings."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"an S3 blob URL looks like s3://bucket/prefix, got {url!r}")
        return cls(s3_client(endpoint_url), parsed.netloc, parsed.path)

    # --- keys ---

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _staging_key(self, staged: StagedFile, suffix: str = "") -> str:
        if not UPLOAD_ID.fullmatch(staged.upload_id):
            raise ValidationError(f"Invalid upload id {staged.upload_id!r}")
        return self._key("staging", staged.upload_id, f"{staged.position}{suffix}")

    def blob_key(self, sha256: str) -> str:
        if not SHA256_HEX.fullmatch(sha256):
            raise ValidationError(f"Invalid blob id {sha256!r}")
        return self._key("blobs", sha256[:2], sha256)

    def blob_uri(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self.blob_key(sha256)}"

    # --- staging ---

    def stage_file(
        self, upload_id: str, position: int, size: int, part_size: int, content_type: str | None
    ) -> StagedFile:
        staged = StagedFile(upload_id, position, size, part_size)
        created = self.client.create_multipart_upload(
            Bucket=self.bucket,
            Key=self._staging_key(staged),
            ContentType=content_type or "application/octet-stream",
        )
        return StagedFile(upload_id, position, size, part_size, str(created["UploadId"]))

    def part_url(
        self, staged: StagedFile, part_number: int, expires_at: datetime, *, base_url: str
    ) -> str:
        # base_url is unused: the object store answers its own URLs.
        if staged.handle is None:
            raise ValueError("a staged S3 file needs its multipart UploadId")
        params = {
            "Bucket": self.bucket,
            "Key": self._staging_key(staged),
            "UploadId": staged.handle,
            "PartNumber": part_number,
            # Signed: the store refuses a body of any other length.
            "ContentLength": staged.part_length(part_number),
        }
        url = self.client.generate_presigned_url(
            "upload_part", Params=params, ExpiresIn=expires_in(expires_at)
        )
        return str(url)

    def part_origin(self) -> str | None:
        # The store's own answer, not one rebuilt from the settings: on AWS the bucket may be
        # in the host name (virtual-hosted), elsewhere in the path. Signing is local work; it
        # fails only without credentials (readiness says so), and then the endpoint's will do.
        try:
            url = self.client.generate_presigned_url(
                "upload_part",
                Params={
                    "Bucket": self.bucket,
                    "Key": self._key("staging"),
                    "UploadId": "-",
                    "PartNumber": 1,
                },
                ExpiresIn=60,
            )
        except BotoCoreError:
            url = self.client.meta.endpoint_url
        parts = urlsplit(str(url))
        return f"{parts.scheme}://{parts.netloc}"

    def _uploaded_parts(self, staged: StagedFile) -> dict[int, StoredPart] | None:
        """The parts S3 holds for the multipart upload; None once it is completed or aborted."""
        if staged.handle is None:
            return None
        parts: dict[int, StoredPart] = {}
        pages = self.client.get_paginator("list_parts").paginate(
            Bucket=self.bucket,
            Key=self._staging_key(staged),
            UploadId=staged.handle,
            PaginationConfig={"PageSize": self.list_page_size},
        )
        try:
            for page in pages:
                for part in page.get("Parts", []):
                    number = int(part["PartNumber"])
                    parts[number] = StoredPart(
                        number, int(part["Size"]), normalise_etag(part["ETag"])
                    )
        except ClientError as exc:
            if error_code(exc) == "NoSuchUpload":
                return None
            raise
        return parts

    def _read_manifest(self, staged: StagedFile) -> dict[str, Any] | None:
        try:
            answer = self.client.get_object(
                Bucket=self.bucket, Key=self._staging_key(staged, ".json")
            )
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        manifest: dict[str, Any] = json.loads(answer["Body"].read())
        return manifest

    def _write_manifest(self, staged: StagedFile, manifest: dict[str, Any]) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._staging_key(staged, ".json"),
            Body=json.dumps(manifest).encode(),
            ContentType="application/json",
        )

    def list_parts(self, staged: Sequence[StagedFile]) -> list[dict[int, StoredPart]]:
        return [self._listed_parts(stage) for stage in staged]  # a multipart upload each

    def _listed_parts(self, staged: StagedFile) -> dict[int, StoredPart]:
        parts = self._uploaded_parts(staged)
        if parts is not None:
            return parts
        manifest = self._read_manifest(staged)
        if manifest is None:
            return {}
        return {n: StoredPart(n, size, etag) for n, size, etag in manifest["parts"]}

    def seal_file(
        self,
        staged: StagedFile,
        etags: Mapping[int, str],
        *,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> CommittedBlob:
        staging_key = self._staging_key(staged)
        parts = self._uploaded_parts(staged)
        if parts is not None:
            total = sum(part.size for part in parts.values())
            if total > staged.size:
                raise FileLargerThanDeclared(total)
            manifest: dict[str, Any] = {
                "size": total,
                "parts": [[p.part_number, p.size, p.etag] for _, p in sorted(parts.items())],
                "sha256": None,
            }
            self._write_manifest(staged, manifest)
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=staging_key,
                UploadId=staged.handle,
                MultipartUpload={
                    "Parts": [
                        {"PartNumber": n, "ETag": f'"{normalise_etag(etag)}"'}
                        for n, etag in sorted(etags.items())
                    ]
                },
            )
        else:
            # An earlier attempt completed the multipart upload, and maybe more.
            manifest = self._read_manifest(staged) or {"sha256": None}
        size = self._size(staging_key)
        if size is None and manifest["sha256"] and self.blob_exists(manifest["sha256"]):
            # Placed by an earlier attempt.
            return CommittedBlob(manifest["sha256"], int(manifest["size"]))
        if size is None:
            raise ValidationError("The staged bytes of this file are gone; start a new upload")
        if size > staged.size:
            raise FileLargerThanDeclared(size)
        sha256 = self._hash_object(staging_key, heartbeat)
        manifest.update(sha256=sha256, size=size)
        self._write_manifest(staged, manifest)
        return CommittedBlob(sha256, size)

    def place_file(
        self,
        staged: StagedFile,
        blob: CommittedBlob,
        *,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> None:
        staging_key = self._staging_key(staged)
        if not self.blob_exists(blob.sha256):
            self._copy(staging_key, self.blob_key(blob.sha256), heartbeat)
        self.client.delete_object(Bucket=self.bucket, Key=staging_key)

    def _hash_object(self, key: str, heartbeat: Callable[[], None]) -> str:
        digest = hashlib.sha256()
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        since_beat = 0
        try:
            for chunk in body.iter_chunks(CHUNK):
                digest.update(chunk)
                since_beat += len(chunk)
                if since_beat >= HEARTBEAT_BYTES:
                    heartbeat()
                    since_beat = 0
        finally:
            body.close()
        return digest.hexdigest()

    def _copy(self, source: str, target: str, heartbeat: Callable[[], None]) -> None:
        """Server-side copy (by parts when large); the caller's heartbeat runs meanwhile."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            copying = pool.submit(
                self.client.copy,
                {"Bucket": self.bucket, "Key": source},
                self.bucket,
                target,
                Config=self.copy_config,
            )
            while not wait([copying], timeout=HEARTBEAT_SECONDS).done:
                heartbeat()
            copying.result()

    def discard_staging(self, staged: Sequence[StagedFile]) -> None:
        for stage in staged:
            self._discard_file(stage)

    def _discard_file(self, staged: StagedFile) -> None:
        staging_key = self._staging_key(staged)
        handles = [staged.handle] if staged.handle else self._open_uploads(staging_key)
        for handle in handles:
            try:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=staging_key, UploadId=handle
                )
            except ClientError as exc:
                if error_code(exc) != "NoSuchUpload":
                    raise
        for key in (staging_key, self._staging_key(staged, ".json")):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def _open_uploads(self, key: str) -> list[str]:
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=key
        )
        return [
            str(u["UploadId"]) for page in pages for u in page.get("Uploads", []) if u["Key"] == key
        ]

    def staged_uploads(self) -> Iterator[str]:
        """Upload ids that hold staged state (for the sweeper's orphan check)."""
        staging = self._key("staging") + "/"
        seen: set[str] = set()
        uploads = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=staging
        )
        objects = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=staging
        )
        keys = [u["Key"] for page in uploads for u in page.get("Uploads", [])]
        keys += [o["Key"] for page in objects for o in page.get("Contents", [])]
        for key in keys:
            upload_id = key[len(staging) :].split("/", 1)[0]
            if upload_id not in seen:
                seen.add(upload_id)
                yield upload_id

    def discard_upload(self, upload_id: str) -> None:
        if not UPLOAD_ID.fullmatch(upload_id):
            raise ValidationError(f"Invalid upload id {upload_id!r}")
        prefix = self._key("staging", upload_id) + "/"
        uploads = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in uploads:
            for upload in page.get("Uploads", []):
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                except ClientError as exc:
                    if error_code(exc) != "NoSuchUpload":
                        raise
        objects = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in objects:
            for item in page.get("Contents", []):
                self.client.delete_object(Bucket=self.bucket, Key=item["Key"])

    # --- blobs ---

    def _size(self, key: str) -> int | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        return int(head["ContentLength"])

    def blob_exists(self, sha256: str) -> bool:
        return self._size(self.blob_key(sha256)) is not None

    def _blob_size(self, sha256: str) -> int:
        size = self._size(self.blob_key(sha256))
        if size is None:
            raise FileNotFoundError(self.blob_uri(sha256))
        return size

    def open_blob(self, sha256: str) -> BinaryIO:
        key = self.blob_key(sha256)
        reader = ObjectReader(self.client, self.bucket, key, self._blob_size(sha256))
        return io.BufferedReader(reader, buffer_size=CHUNK)

    def delete_blob(self, sha256: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.blob_key(sha256))

    def download_url(
        self, sha256: str, *, filename: str, expires_at: datetime, base_url: str
    ) -> str:
        params = {
            "Bucket": self.bucket,
            "Key": self.blob_key(sha256),
            "ResponseContentDisposition": content_disposition(filename),
            "ResponseContentType": "application/octet-stream",
        }
        url = self.client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=expires_in(expires_at)
        )
        return str(url)

    def check(self, *, write: bool = False) -> None:
        """Raise ServiceUnavailable naming what to fix (the credentials, the bucket, the
        endpoint) unless the bucket answers, and with ``write`` takes and deletes an object."""
        probe = self._key("probe", secrets.token_hex(8))
        check_bucket(self.client, self.bucket, self.prefix, probe=probe, write=write)
