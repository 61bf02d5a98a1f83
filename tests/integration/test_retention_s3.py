"""Retention's S3 archive against a real S3-compatible HTTP server (moto's, on localhost): the sink is built from the
environment as in production (``UNICORE_ARCHIVE_S3_ENDPOINT_URL``, AWS credentials for boto3), the object is read
back from the server, and a bucket that does not exist removes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import redis
from moto.server import ThreadedMotoServer
from unicore.archive import read_document, sink_for
from unicore.retention import Retention
from unicore.store.keys import RETENTION_JOURNAL
from unicore.store.tasks import TaskStore

from tests.integration.conftest import TurnRunner
from tests.integration.test_retention import HOUR, LATER, assert_archived, make_tree, stored


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's S3 server on a free localhost port, with a new bucket (moto keeps its buckets for the whole process);
    boto3 in this process points at it. Yields (client, bucket)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in {"UNICORE_ARCHIVE_S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "NO_PROXY": host}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    bucket = f"archive-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    yield client, bucket
    server.stop()


def test_an_idle_tree_is_archived_to_an_s3_server_and_read_back(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, s3_server: Any,
) -> None:
    client, bucket = s3_server
    ids = make_tree(store, turn, "s3real", children=2)
    messages = {task_id: stored(redis_client, task_id) for task_id in ids}
    outcomes = Retention(redis_client, HOUR, sink_for(f"s3://{bucket}/unicore/"), clock=LATER).run(["s3real"])
    assert [o.action for o in outcomes] == ["removed"]
    url = outcomes[0].url
    assert url.startswith(f"s3://{bucket}/unicore/s3real-") and url.endswith(".jsonl")
    key = url.removeprefix(f"s3://{bucket}/")
    listed = [item["Key"] for item in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == [key]
    data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert read_document(data)[0]["root"] == "s3real"
    assert_archived(redis_client, data, ids, messages)


def test_a_missing_bucket_removes_nothing(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, s3_server: Any,
) -> None:
    client, bucket = s3_server
    ids = make_tree(store, turn, "nobucket", children=1)
    outcomes = Retention(redis_client, HOUR, sink_for("s3://no-such-bucket/x"), clock=LATER).run(["nobucket"])
    assert [o.action for o in outcomes] == ["archive-failed"] and "NoSuchBucket" in outcomes[0].reason
    assert all(store.exists(task_id) and stored(redis_client, task_id) for task_id in ids)
    assert not redis_client.exists(RETENTION_JOURNAL)
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)
