"""The task API's pure parts: transcript windows and shaping, routing (the aggregated API's paths, the RBAC verb and
subresource of each), discovery documents and error bodies."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from unicore.store.records import parse_turn_headers
from unicore_operator.task_api import transcript as pages
from unicore_operator.task_api.authz import Attributes
from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.routes import ROUTES, Target, discovery, dispatch, resolve

BASE = "/apis/tasks.unicore.dev/v1alpha1"


def headers_json(*turns: tuple[int, int]) -> list[str]:
    return [json.dumps({"turn_number": n, "started_at": 100.0 + n, "first_seq": first}) for n, first in turns]


def message(seq: int, turn: int, role: str, *blocks: dict[str, Any]) -> str:
    return json.dumps(
        {
            "seq": seq,
            "turn_number": turn,
            "message_number": 0,
            "role": role,
            "content": list(blocks),
            "timestamp": 1.0,
        }
    )


def test_windows_follow_since_limit_and_turn() -> None:
    headers = parse_turn_headers(headers_json((1, 3), (0, 0), (2, 7)))
    assert [h.number for h in headers] == [0, 1, 2]
    assert pages.page_window(headers, 9, since=0, limit=4, turn=None) == (0, 4)
    assert pages.page_window(headers, 9, since=8, limit=4, turn=None) == (8, 9)
    assert pages.page_window(headers, 9, since=20, limit=4, turn=None) == (20, 20)
    assert pages.page_window(headers, 9, since=0, limit=100, turn=1) == (3, 7)
    assert pages.page_window(headers, 9, since=5, limit=1, turn=1) == (5, 6)
    assert pages.page_window(headers, 9, since=0, limit=100, turn=2) == (7, 9)
    assert pages.page_window(headers, 9, since=0, limit=5, turn=7) is None


def test_tool_details_only_when_asked_and_blocks_clipped() -> None:
    use = {"toolUse": {"toolUseId": "t1", "name": "spawn_task", "input": {"prompt": "secret plan"}}}
    result = {
        "toolResult": {
            "toolUseId": "t1",
            "status": "error",
            "content": [{"text": "boom"}, {"json": {"a": 1}}],
        }
    }
    brief = pages.shape_block(use, tools=False), pages.shape_block(result, tools=False)
    assert brief == (
        {"toolUse": {"toolUseId": "t1", "name": "spawn_task"}},
        {"toolResult": {"toolUseId": "t1", "status": "error"}},
    )
    full = pages.shape_block(use, tools=True), pages.shape_block(result, tools=True)
    assert full[0]["toolUse"]["input"] == {"prompt": "secret plan"}
    assert full[1]["toolResult"]["content"] == [{"text": "boom"}, {"text": '{"a": 1}'}]
    long = pages.shape_block({"text": "y" * (pages.BLOCK_CHARS + 10)}, tools=False)["text"]
    assert long.startswith("y" * pages.BLOCK_CHARS) and "10 more characters clipped" in long


def test_page_respects_the_byte_budget_but_always_moves_forward() -> None:
    headers = parse_turn_headers(headers_json((0, 0)))
    raw = [message(i, 0, "user", {"text": "z" * 1000}) for i in range(5)]
    page = pages.build_page(
        headers=headers,
        meta={"0:ended_at": "200.5", "0:summary": "s"},
        total=5,
        start=0,
        raw_messages=raw,
        tools=False,
        turn=None,
        byte_budget=2500,
    )
    assert [m["seq"] for m in page["messages"]] == [0, 1] and page["next"] == 2 and page["more"] is True
    assert page["turns"] == [
        {
            "number": 1,  # stored turn 0 is shown as turn 1, as its Job <task>-t1
            "startedAt": 100.0,
            "endedAt": 200.5,
            "firstSeq": 0,
            "messageCount": 5,
            "iterations": None,
            "summary": "s",
            "note": "",
        }
    ]
    tiny = pages.build_page(
        headers=headers,
        meta={},
        total=5,
        start=4,
        raw_messages=raw[4:],
        tools=False,
        turn=None,
        byte_budget=10,
    )
    assert [m["seq"] for m in tiny["messages"]] == [4] and tiny["more"] is False


class ExplodingApi:
    def get_task(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        raise RuntimeError("bug")

    def get_transcript(self, namespace: str, name: str, query: str) -> tuple[int, dict[str, Any]]:
        raise ApiError(503, "Redis is unavailable; retry", retry_after=1)


def test_every_route_is_a_subresource_with_the_verb_the_api_server_checks() -> None:
    reads = {sub: resolve("GET", f"{BASE}/namespaces/team-a/agenttasks/demo/{sub}")
             for sub in ("summary", "tree", "transcript", "stream", "approvals")}
    for sub, target in reads.items():
        assert target.attributes() == Attributes(verb="get", namespace="team-a", name="demo", subresource=sub,
                                                 group="tasks.unicore.dev", version="v1alpha1", resource="agenttasks")
    post = resolve("POST", f"{BASE}/namespaces/team-a/agenttasks/demo/messages/")
    assert (post.route.verb, post.route.subresource, post.namespace, post.name) == (
        "create", "messages", "team-a", "demo")
    decide = resolve("POST", f"{BASE}/namespaces/team-a/agenttasks/demo/approvals")
    assert (decide.route.verb, decide.route.subresource) == ("create", "approvals")
    assert {(r.method, r.subresource) for r in ROUTES if r.resource == "agenttasks"} == {
        ("GET", "summary"), ("GET", "tree"), ("GET", "transcript"), ("GET", "stream"), ("POST", "messages"),
        ("GET", "approvals"), ("POST", "approvals")}
    # the conversations resource (issue 33): the collection, an object and its subresources
    assert {(r.method, r.subresource, r.collection) for r in ROUTES if r.resource == "conversations"} == {
        ("GET", "", True), ("POST", "", True), ("GET", "", False), ("DELETE", "", False), ("GET", "posts", False),
        ("POST", "posts", False), ("POST", "members", False), ("POST", "control", False)}
    listing = resolve("GET", f"{BASE}/namespaces/team-a/conversations")
    assert listing.attributes() == Attributes(verb="list", namespace="team-a", name="", subresource="",
                                              group="tasks.unicore.dev", version="v1alpha1", resource="conversations")
    posting = resolve("POST", f"{BASE}/namespaces/team-a/conversations/room/posts")
    assert (posting.route.verb, posting.route.resource, posting.route.subresource, posting.name) == (
        "create", "conversations", "posts", "room")
    for method, path, code in (
        ("DELETE", f"{BASE}/namespaces/a/agenttasks/b/messages", 405),
        ("POST", f"{BASE}/namespaces/a/agenttasks/b/transcript", 405),
        ("GET", f"{BASE}/namespaces/a/agenttasks/b/logs", 404),
        ("GET", f"{BASE}/namespaces/a/agenttasks/b", 404),  # no bare resource: agenttasks are the CRD's
        ("PUT", f"{BASE}/namespaces/a/conversations/room", 405),
        ("GET", f"{BASE}/namespaces/a/conversations/room/logs", 404),
        ("GET", "/v1/namespaces/a/agenttasks/b/transcript", 404),  # the old service-proxy paths are gone
        ("GET", "/apis/unicore.dev/v1alpha1/namespaces/a/agenttasks/b/transcript", 404),
    ):
        with pytest.raises(ApiError) as refused:
            resolve(method, path)
        assert refused.value.status == code, (method, path)
        assert refused.value.body()["reason"] == {404: "NotFound", 405: "MethodNotAllowed"}[code]


def test_discovery_lists_only_the_subresources() -> None:
    groups = discovery("/apis")
    assert groups is not None and groups["kind"] == "APIGroupList"
    (group,) = groups["groups"]
    version = {"groupVersion": "tasks.unicore.dev/v1alpha1", "version": "v1alpha1"}
    assert group == {"name": "tasks.unicore.dev", "versions": [version], "preferredVersion": version}
    assert discovery("/apis/tasks.unicore.dev/") == {"kind": "APIGroup", "apiVersion": "v1", **group}
    resources = discovery(BASE)
    assert resources is not None and resources["kind"] == "APIResourceList"
    assert resources["groupVersion"] == "tasks.unicore.dev/v1alpha1"
    assert {r["name"]: (r["verbs"], r["namespaced"], r["kind"]) for r in resources["resources"]} == {
        "agenttasks/summary": (["get"], True, "TaskSummary"),
        "agenttasks/tree": (["get"], True, "TaskTree"),
        "agenttasks/transcript": (["get"], True, "TranscriptPage"),
        "agenttasks/stream": (["get"], True, "TokenStream"),
        "agenttasks/messages": (["create"], True, "MessageReceipt"),
        "agenttasks/approvals": (["get", "create"], True, "ApprovalList"),  # one entry, both routes' verbs
        "conversations": (["list", "create", "get", "delete"], True, "ConversationList"),
        "conversations/posts": (["get", "create"], True, "ConversationPosts"),
        "conversations/members": (["create"], True, "MemberReceipt"),
        "conversations/control": (["create"], True, "ControlReceipt"),
    }
    assert discovery("/apis/unicore.dev") is None and discovery(f"{BASE}/namespaces") is None


def test_dispatch_turns_errors_into_kubernetes_status_bodies() -> None:
    api: Any = ExplodingApi()

    def target(sub: str, method: str = "GET") -> Target:
        return resolve(method, f"{BASE}/namespaces/a/agenttasks/b/{sub}")

    crash = dispatch(api, target("summary"), sender="user:alice")
    assert crash.status == 500 and crash.body["kind"] == "Status" and crash.body["reason"] == "InternalError"
    busy = dispatch(api, target("transcript"), "since=0", sender="user:alice")
    assert (busy.status, busy.headers, busy.body["code"]) == (503, {"Retry-After": "1"}, 503)


def test_unwatched_namespaces_are_not_found_with_the_reason() -> None:
    from unicore_operator.context import OperatorContext
    from unicore_operator.settings import OperatorSettings
    from unicore_operator.task_api.server import context_lookup
    from unicore_operator.task_api.service import TaskApi

    objects = {("other", "demo"): {"metadata": {"namespace": "other", "name": "demo"}}}

    class Kube:  # the GET the operator falls back to when its index does not hold the task
        def get_agenttask(self, namespace: str, name: str) -> dict[str, Any] | None:
            return objects.get((namespace, name))

    settings = OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("team-a",))
    ctx = OperatorContext(settings=settings, redis=cast(Any, None), kube=cast(Any, Kube()), store=None)
    lookup = context_lookup(ctx)
    api = TaskApi(store=type("Store", (), {"message_cap_bytes": 1024})(), lookup=lookup)  # type: ignore[arg-type]
    response = dispatch(api, resolve("GET", f"{BASE}/namespaces/other/agenttasks/demo/summary"), sender="user:a")
    assert response.status == 404
    assert response.body["message"] == (
        'agenttask "other/demo" not found (namespace other is not watched by this operator)'
    )
    assert lookup("team-a", "demo") is None
    objects[("team-a", "demo")] = {"metadata": {"namespace": "team-a", "name": "demo"}}
    assert lookup("team-a", "demo") == objects[("team-a", "demo")]
