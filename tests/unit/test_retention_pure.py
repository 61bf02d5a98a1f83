"""Retention's pure parts (issue 15, item 4): when a tree counts as idle, the archive document and its name, the
settings' one-line errors, and the status an archived AgentTask gets."""

from __future__ import annotations

import json

import pytest
from unicore.archive import check_archive_url, document, object_name, read_document
from unicore.errors import ConfigError
from unicore.store.retention import ArchivedNote, TaskDump, TreeDump
from unicore_client.local.gc_command import RetentionSettings
from unicore_operator.retention_daemon import archived_status
from unicore_operator.settings import load_settings

NOW = 1_800_000_000.0


def dump(task_id: str, *, updated: float = NOW - 7200, **parts: object) -> TaskDump:
    record = {"id": task_id, "updated_at": repr(updated), "created_at": repr(updated - 60), "turns": "1",
              "status": "idle", "total_tokens": "12"}
    keys: dict[str, dict[str, object]] = {
        "task": {"type": "hash", "value": record},
        "turnmeta": {"type": "hash", "value": {"0:ended_at": repr(updated)}},
        "messages": {"type": "list", "value": [json.dumps({"seq": 0, "timestamp": updated, "role": "user"})]},
    }
    for part, value in parts.items():
        if part == "record":
            record.update(value)  # type: ignore[arg-type]
        else:
            keys[part] = {"type": "list" if isinstance(value, list) else "string", "value": value}
    return TaskDump(task_id, keys)


def test_a_settled_tree_past_its_ttl_is_removable_and_anything_live_keeps_it() -> None:
    assert TreeDump("r", [dump("r"), dump("r-a")]).not_removable(now=NOW, ttl=3600) is None
    young = TreeDump("r", [dump("r"), dump("r-a", updated=NOW - 60)])
    assert young.not_removable(now=NOW, ttl=3600) == "idle for 60s, under the TTL of 3600s"
    cases = {
        "a turn holds its lease": dump("r-a", lease="holder"),
        "1 message(s) queued": dump("r-a", inbox=["{}"]),
        "a turn has not ended": dump("r-a", record={"status": "running"}),
        "a report to its parent is owed": dump("r-a", record={"report_id": "completion:r-a:1"}),
    }
    for reason, child in cases.items():
        assert TreeDump("r", [dump("r"), child]).not_removable(now=NOW, ttl=3600) == f"r-a is not settled ({reason})"
    unfinished = dump("r-a", record={"turns": "2"})  # turn 1 started, its end never recorded
    assert "has not ended" in str(TreeDump("r", [dump("r"), unfinished]).not_removable(now=NOW, ttl=3600))
    # A task the caller gave up on (Failed) may keep its queue; one it says is waiting keeps the tree.
    assert TreeDump("r", [dump("r"), cases["1 message(s) queued"]]).not_removable(
        now=NOW, ttl=3600, failed=["r-a"]) is None
    assert TreeDump("r", [dump("r"), cases["a turn holds its lease"]]).not_removable(
        now=NOW, ttl=3600, failed=["r-a"]) is not None
    assert TreeDump("r", [dump("r"), dump("r-a")]).not_removable(
        now=NOW, ttl=3600, waiting=["r-a"]) == "r-a is not settled (waiting)"


def test_the_last_activity_is_the_newest_of_record_heartbeat_and_last_message() -> None:
    task = dump("r", heartbeat=repr(NOW - 5))
    assert task.last_activity() == NOW - 5
    task = dump("r", messages=[json.dumps({"timestamp": NOW - 7})])
    assert task.last_activity() == NOW - 7


def test_the_document_reads_back_and_its_name_depends_on_the_tasks_only() -> None:
    tree = TreeDump("ns/root", [dump("ns/root"), dump("ns/root-a")])
    first, digest = document(tree, NOW)
    again, same = document(tree, NOW + 60)
    assert same == digest and first != again  # only the header's time differs
    header, tasks = read_document(first)
    assert header["format"] == "unicore.tree-archive/v1" and header["tasks"] == ["ns/root", "ns/root-a"]
    assert tasks[1]["keys"]["messages"]["value"] == tree.tasks[1].keys["messages"]["value"]
    assert tasks[0]["usage"]["total_tokens"] == 12
    assert object_name("ns/root", digest) == f"ns/root-{digest[:16]}.jsonl"
    long_name = object_name("ns/" + "x" * 253, digest)
    assert long_name.startswith("ns/x") and len(long_name.split("/")[-1].encode()) <= 255
    with pytest.raises(ValueError):
        read_document(b'{"format": "something else"}\n')


@pytest.mark.parametrize("url", ["file:///var/archive", "s3://bucket", "s3://bucket/some/prefix"])
def test_archive_urls_accepted(url: str) -> None:
    assert check_archive_url(f" {url} ") == url


@pytest.mark.parametrize("url", ["file://host/x", "file:relative", "s3:///prefix", "https://bucket", "/var/x"])
def test_archive_urls_refused(url: str) -> None:
    with pytest.raises(ValueError, match="archive URL"):
        check_archive_url(url)


def test_bad_settings_are_one_line_naming_the_variable() -> None:
    assert RetentionSettings.from_env({}).ttl_seconds == 0  # off by default
    assert RetentionSettings.from_env({"UNICORE_RETENTION_ARCHIVE_URL": "  "}).archive_url is None
    for env in ({"UNICORE_RETENTION_TTL_SECONDS": "-5"}, {"UNICORE_RETENTION_ARCHIVE_URL": "ftp://x"}):
        with pytest.raises(ConfigError) as caught:
            RetentionSettings.from_env(env)
        assert "\n" not in str(caught.value) and next(iter(env)) in str(caught.value)
    op = load_settings({"REDIS_URL": "redis://r"})
    assert op.retention_ttl_seconds == 0 and op.retention_archive_url is None and op.retention_interval_seconds == 300
    with pytest.raises(ConfigError, match="UNICORE_RETENTION_ARCHIVE_URL"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_RETENTION_ARCHIVE_URL": "gs://bucket"})
    with pytest.raises(ConfigError, match="UNICORE_RETENTION_INTERVAL_SECONDS"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_RETENTION_INTERVAL_SECONDS": "0"})


def test_an_archived_agenttask_says_where_its_conversation_went() -> None:
    previous = {"phase": "Idle", "conditions": [{"type": "Ready", "status": "True", "reason": "Idle"},
                                                 {"type": "Other", "status": "True"}]}
    note = ArchivedNote("ns/t", "s3://b/ns/t-0123.jsonl", NOW, "ns/t")
    status = archived_status(note, 3600, previous)
    assert status["phase"] == "Archived" and status["activeJob"] == ""
    assert status["archive"] == {"url": "s3://b/ns/t-0123.jsonl", "archivedAt": "2027-01-15T08:00:00Z"}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Archived"]["status"] == "True" and conditions["Archived"]["reason"] == "Archived"
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "Archived"
    assert conditions["Other"] == {"type": "Other", "status": "True"}
    assert "s3://b/ns/t-0123.jsonl" in status["message"]
    removed = archived_status(ArchivedNote("ns/t", "", NOW, "ns/t"), 60, {})
    assert removed["archive"]["url"] == "" and "not archived" in removed["message"]
    assert {c["type"]: c["reason"] for c in removed["conditions"]}["Archived"] == "Removed"


def _task(name: str, phase: str | None, parent: str | None = None, **spec: object) -> dict[str, object]:
    body_spec: dict[str, object] = dict(spec)
    if parent:
        body_spec["parentRef"] = {"name": parent}
    return {"metadata": {"namespace": "ns", "name": name, "labels": {}}, "spec": body_spec,
            "status": {"phase": phase} if phase else {}}


def test_the_operator_offers_only_roots_whose_every_indexed_task_is_settled() -> None:
    from types import SimpleNamespace

    from unicore_operator.retention_daemon import RetentionLoop

    bodies = [
        _task("quiet", "Idle"), _task("quiet-a", "Failed", "quiet"),
        _task("busy", "Idle"), _task("busy-a", "Idle", "busy"), _task("busy-a-x", None, "busy-a"),  # not set up
        _task("asks", "WaitingForApproval"),
        _task("held", "Idle", suspend=True),
        _task("gone", "Archived"),
    ]
    index = {("ns", str(b["metadata"]["name"])): [b] for b in bodies}  # type: ignore[index]
    ctx = SimpleNamespace(
        agenttasks=index, turnjobs=None, redis=SimpleNamespace(sync=None),
        settings=SimpleNamespace(retention_archive_url=None, retention_ttl_seconds=60.0),
        watches=lambda namespace: True,
        indexed_task=lambda namespace, name: (index.get((namespace, name)) or [None])[0],
    )
    roots, failed, kept, settled = RetentionLoop(ctx).view()  # type: ignore[arg-type]
    assert [r for r in roots if r not in kept] == ["ns/quiet"]
    assert failed == {"ns/quiet-a"} and {"ns/busy", "ns/busy-a-x", "ns/asks", "ns/held"} <= kept
    assert "ns/gone" not in roots and "ns/gone" not in settled and "ns/quiet" in settled
