"""Archives of removed conversations (retention, ``unicore.retention``): one JSON-lines document per task tree, written
to a directory (``file:///path``) or to S3 (``s3://bucket/prefix``, boto3) and verified before anything is deleted.

The document (``FORMAT``): a header line ``{"format", "root", "archivedAt", "tasks": [ids]}``, then one line per
task, root first: ``{"task": id, "keys": {part: {"type", "value"}}, "usage": {...}}``: every key of the task as
Redis stored it (``part`` as in ``uc:{<id>}:<part>``; lists (messages, turn headers, inbox) hold the stored JSON
strings byte for byte, hashes their fields, sorted sets ``[member, score]`` pairs). The live token stream is not
archived (a view of answers that are stored anyway).

An object's name is ``<root id>-<sha256 of the task lines, 16 hex>.jsonl`` (a root id ``ns/name`` makes a folder
per namespace; a name too long for a file is shortened with its hash), so writing the same tree again after a crash
replaces the same object instead of adding one.

S3 settings, in the style of the Bedrock provider's: ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` (or
any credential boto3 finds: env keys, IRSA / Pod Identity), ``UNICORE_ARCHIVE_S3_ENDPOINT_URL`` (an S3-compatible
store such as MinIO).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AliasChoices, Field

from unicore.errors import ConfigError, UniCoreError
from unicore.settings import EnvSettings
from unicore.store.retention import TreeDump

FORMAT = "unicore.tree-archive/v1"
CONTENT_TYPE = "application/x-ndjson"
MAX_NAME_BYTES = 200  # of one path component, leaving room for the digest and suffix under 255


class ArchiveError(UniCoreError):
    """The archive could not be written or did not read back as written: nothing may be deleted."""


class ArchiveEnvironment(EnvSettings):
    """The S3 sink's variables (boto3 reads the credentials itself)."""

    what: ClassVar[str] = "archive settings in the environment"

    region: str | None = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    profile: str | None = Field(None, validation_alias="AWS_PROFILE")
    s3_endpoint_url: str | None = Field(None, validation_alias="UNICORE_ARCHIVE_S3_ENDPOINT_URL")


def check_archive_url(url: str) -> str:
    """``url`` stripped if it is a ``file:///absolute/path`` or ``s3://bucket[/prefix]`` URL; else ValueError."""
    url = url.strip()
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ValueError(f"{url!r}: a file archive URL is file:///absolute/path")
        return url
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"{url!r}: an S3 archive URL is s3://bucket[/prefix]")
        return url
    raise ValueError(f"{url!r}: the archive URL must be file:///path or s3://bucket/prefix")


def document(tree: TreeDump, archived_at: float) -> tuple[bytes, str]:
    """(the JSON-lines document of ``tree``, the hex sha256 of its task lines)."""
    lines = []
    for task in tree.tasks:
        record = task.record
        usage = {name: int(float(record.get(name) or 0)) for name in (
            "input_tokens", "output_tokens", "total_tokens", "tree_input_tokens", "tree_output_tokens",
            "tree_total_tokens")}
        lines.append(json.dumps({"task": task.task_id, "keys": task.keys, "usage": usage}, sort_keys=True))
    body = "".join(line + "\n" for line in lines).encode()
    header = {"format": FORMAT, "root": tree.root, "tasks": tree.ids,
              "archivedAt": datetime.datetime.fromtimestamp(archived_at, datetime.UTC).isoformat()}
    return json.dumps(header).encode() + b"\n" + body, hashlib.sha256(body).hexdigest()


def read_document(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, task lines) of an archive document."""
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    if not lines or lines[0].get("format") != FORMAT:
        raise ValueError("not a UniCore tree archive")
    return lines[0], lines[1:]


def object_name(root: str, digest: str) -> str:
    """``<root>-<digest16>.jsonl``; a component too long for a file name is cut and keeps a hash of itself."""
    parts = root.split("/")
    leaf = parts[-1]
    if len(leaf.encode()) > MAX_NAME_BYTES:
        leaf = leaf[: MAX_NAME_BYTES - 17] + "-" + hashlib.sha256(leaf.encode()).hexdigest()[:16]
    return "/".join([*parts[:-1], f"{leaf}-{digest[:16]}.jsonl"])


class ArchiveSink(Protocol):
    url: str

    def write(self, name: str, data: bytes) -> str:
        """Store ``data`` as ``name``, read it back, and return its URL; ArchiveError when either fails."""


class FileSink:
    """A directory: the file is written beside its final name, flushed to disk, renamed, then read back."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.root = Path(unquote(urlparse(url).path))

    def write(self, name: str, data: bytes) -> str:
        path = self.root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            written = path.read_bytes()
        except OSError as exc:
            raise ArchiveError(f"writing the archive {path}: {exc.strerror or exc}") from exc
        if hashlib.sha256(written).digest() != hashlib.sha256(data).digest():
            raise ArchiveError(f"the archive {path} did not read back as written")
        return path.as_uri()


class S3Sink:
    """An S3 bucket and prefix: PUT with Content-MD5 (S3 refuses a body that arrives changed), then HEAD: the
    stored size and ETag must be the ones written."""

    def __init__(self, url: str, client: Any = None, env: ArchiveEnvironment | None = None) -> None:
        parsed = urlparse(url)
        self.url = url
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self._client = client
        self._env = env

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            env = self._env or ArchiveEnvironment.from_env()
            try:
                session = boto3.Session(profile_name=env.profile, region_name=env.region)
                self._client = session.client("s3", endpoint_url=env.s3_endpoint_url)
            except BotoCoreError as exc:
                raise ConfigError(f"the S3 archive client: {exc}") from exc
        return self._client

    def write(self, name: str, data: bytes) -> str:
        key = f"{self.prefix}/{name}" if self.prefix else name
        md5 = hashlib.md5(data, usedforsecurity=False)
        try:
            put = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=CONTENT_TYPE,
                                         ContentMD5=base64.b64encode(md5.digest()).decode())
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            raise ArchiveError(f"writing the archive s3://{self.bucket}/{key}: {exc}") from exc
        etag = put.get("ETag")
        if head.get("ContentLength") != len(data) or not etag or head.get("ETag") != etag:
            raise ArchiveError(f"the archive s3://{self.bucket}/{key} did not read back as written (size "
                               f"{head.get('ContentLength')} of {len(data)}, ETag {head.get('ETag')} vs {etag})")
        return f"s3://{self.bucket}/{key}"


def sink_for(url: str, *, s3_client: Any = None) -> ArchiveSink:
    """The sink of an archive URL (ConfigError for a bad one)."""
    try:
        url = check_archive_url(url)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if url.startswith("file:"):
        return FileSink(url)
    return S3Sink(url, s3_client)


__all__ = ["FORMAT", "ArchiveEnvironment", "ArchiveError", "ArchiveSink", "FileSink", "S3Sink", "check_archive_url",
           "document", "object_name", "read_document", "sink_for"]
