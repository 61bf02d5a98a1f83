"""`kubectl agenttask ui` (issue 16, cluster mode) on the real local control plane: the web UI's server runs as the real
plugin (`kubectl agenttask ui`, kubectl-agenttask on PATH) with a user's kubeconfig (a client certificate the cluster
CA signs) and talks only to the API server: the tree from a watch of the AgentTasks the user may list, transcripts,
live answers and messages through the task API (the aggregated API served by a real operator, as in
test_task_api_tenancy), suspend/resume as AgentTask patches. alice holds the chart's editor role (and the built-in
view, for Events) in namespace A; bob the messenger role in B only. Each sees their own namespace; bob gets a clear 403
for A's tasks, in the HTTP API and in the page (Debian's chromium via Playwright, as tests/ui)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import yaml
from kubernetes import client
from unicore.store.tasks import TaskStore
from unicore_client.ui.backend_protocol import Conflict

from tests.cluster.operator_harness import VENV_BIN, OperatorProcess, Tasks, install_agent_rbac, install_crd
from tests.cluster.task_api_harness import aggregated_task_api, ca_pair
from tests.cluster.test_chart_render import one, render
from tests.cluster.test_task_api_tenancy import bind, user_kubeconfig
from tests.ui.conftest import CHROMIUM, UI, _printed_url
from tests.ui.test_ui_http import cookie, csrf, read_events, request
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster
SETTLE = 180.0
ROLES = ("unicore-agenttask-editor", "unicore-agenttask-messenger")
TREE_SCRIPT = {
    "default": "Done.",
    "tasks": {
        "water": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "Boiling point?"}},
                                {"name": "spawn_task", "input": {"name": "b", "prompt": "Freezing point?"}}]},
                  {"text": "I asked two helpers; waiting for them."}],
        "water-*": [{"text": "Helper reporting: done."}],
    },
}


def chat_spec(name: str, namespace: str) -> dict[str, Any]:
    """Answers, then echoes each later turn's messages after a short pause (a live answer to watch)."""
    return {"prompt": "Say you are ready.", "model": "scripted", "gpus": 0,
            "script": {"default": "Done.", "tasks": {name: [{"text": f"ready in {namespace}"}]
                                                     + [{"sleep": 1.0, "echo": True}] * 10}}}


@dataclass
class Env:
    a: str
    b: str
    kubeconfig: Path  # the admin's
    store: TaskStore
    tmp: Path
    api: Any
    users: dict[str, Path] = field(default_factory=dict)

    def tasks(self, namespace: str) -> Tasks:
        return Tasks(self.api, namespace)

    def user_texts(self, task_id: str) -> list[str]:
        """Every user text block stored in the task's history."""
        return [block["text"] for turn in self.store.load_history(task_id) for message in turn.messages
                if message.role == "user" for block in message.content if "text" in block]

    def inbox_ids(self, task_id: str) -> list[str]:
        """The inbox ids the task's stored user messages were drained from (``user:<client id>`` for sends)."""
        return [each for turn in self.store.load_history(task_id) for message in turn.messages
                for each in message.inbox_ids]

    def idle(self, namespace: str, name: str, turns: int = 1) -> bool:
        status = (self.tasks(namespace).get(name) or {}).get("status") or {}
        return status.get("phase") == "Idle" and int(status.get("turns") or 0) >= turns

    def plugin_env(self, user: str) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.users[user]),
                "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def env(control_plane: Any, redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    from unicore_devcluster import pki

    install_crd(control_plane.kubeconfig)
    tmp = tmp_path_factory.mktemp("ui-cluster")
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    a, b, operator_ns = f"ui-a-{suffix}", f"ui-b-{suffix}", f"ui-op-{suffix}"
    for namespace in (a, b, operator_ns):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    for namespace in (a, b):
        wait_for(lambda ns=namespace: core.read_namespaced_service_account("default", ns), timeout=30,
                 what="default SA")
        install_agent_rbac(control_plane.kubeconfig, namespace)
    chart = render(namespace=operator_ns)
    for role in ROLES:  # the chart's user ClusterRoles, as rendered
        rbac.create_cluster_role(one(chart, "ClusterRole", role))
    store = TaskStore(redis.Redis.from_url(redis_server.url, decode_responses=True))
    try:
        with aggregated_task_api(control_plane, operator_ns, tmp) as endpoint:
            operator = OperatorProcess(control_plane.kubeconfig, redis_server.url, a, tmp / "operator.log",
                                       **endpoint.env, UNICORE_NAMESPACES=f"{a},{b}",
                                       POD_NAME=f"operator-{suffix}").start()
            try:
                environment = Env(a, b, Path(control_plane.kubeconfig), store, tmp, api)
                for user, namespace in (("alice", a), ("bob", b)):
                    cert = pki.issue(ca_pair(control_plane), tmp / "users", user, user, client=True)
                    environment.users[user] = user_kubeconfig(environment.kubeconfig, tmp / "users", user, cert,
                                                              namespace)
                bind(api, a, "unicore-agenttask-editor", "alice")
                bind(api, a, "view", "alice")  # Events
                bind(api, b, "unicore-agenttask-messenger", "bob")
                environment.tasks(a).create("water", {"prompt": "Tell me about water.", "model": "scripted",
                                                      "gpus": 0, "script": TREE_SCRIPT})
                for namespace in (a, b):
                    environment.tasks(namespace).create("chat", chat_spec("chat", namespace))
                endpoint.publish()
                for namespace, name in ((a, "water"), (a, "water-a"), (a, "water-b"), (a, "chat"), (b, "chat")):
                    wait_for(lambda ns=namespace, n=name: environment.idle(ns, n), timeout=SETTLE,
                             what=f"{namespace}/{name} Idle")
                yield environment
            finally:
                operator.stop()
                print(f"--- operator log ({operator.log_path}):\n{operator.log(200)}")
    finally:
        for role in ROLES:
            rbac.delete_cluster_role(role)
        for namespace in (a, b, operator_ns):
            core.delete_namespace(namespace)
        api.close()


def start_ui(env: Env, user: str, *args: str) -> Iterator[UI]:
    with open(env.tmp / f"ui-{user}.stderr", "w") as stderr:
        process = subprocess.Popen(["kubectl", "agenttask", "ui", "--port", "0", *args], env=env.plugin_env(user),
                                   text=True, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
    try:
        yield UI(url=_printed_url(process), process=process)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        print(f"--- {user}'s UI stderr:\n{(env.tmp / f'ui-{user}.stderr').read_text()}")


@pytest.fixture(scope="module")
def alice_ui(env: Env) -> Iterator[UI]:
    yield from start_ui(env, "alice", "-n", env.a)


@pytest.fixture(scope="module")
def bob_ui(env: Env) -> Iterator[UI]:
    yield from start_ui(env, "bob", "-n", env.b)


def get_json(ui: UI, jar: str, path: str) -> tuple[int, Any]:
    reply = request(ui, "GET", path, headers={"Cookie": jar})
    return reply.status, json.loads(reply.read() or b"null")


def post(ui: UI, jar: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    reply = request(ui, "POST", path, headers={"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}, body=body)
    return reply.status, json.loads(reply.read() or b"null")


def api_task(task_id: str, rest: str = "") -> str:
    return f"/api/tasks/{quote(task_id, safe='')}{rest}"


# ---------------------------------------------------------------------------------------------------- HTTP API


def test_the_tree_is_the_users_namespace_and_grows_live_from_the_watch(env: Env, alice_ui: UI) -> None:
    jar = cookie(alice_ui)
    status, tree = get_json(alice_ui, jar, "/api/tree")
    assert status == 200
    nodes = {node["id"]: node for node in tree["nodes"]}
    a = env.a
    assert set(nodes) == {f"{a}/water", f"{a}/water-a", f"{a}/water-b", f"{a}/chat"}  # nothing of B
    assert nodes[f"{a}/water-a"]["parent"] == f"{a}/water" and nodes[f"{a}/water-a"]["depth"] == 1
    assert all(node["phase"] == "done" and node["status"] == "Idle" for node in nodes.values())
    ids = [node["id"] for node in tree["nodes"]]
    assert ids.index(f"{a}/water") + 1 == min(ids.index(f"{a}/water-a"), ids.index(f"{a}/water-b"))  # depth first
    assert nodes[f"{a}/water-a"]["last"] == "Helper reporting: done."

    stream = request(alice_ui, "GET", "/api/events", headers={"Cookie": jar})
    assert stream.status == 200
    first = read_events(stream, 1)[0]
    assert first[1] == "tree" and {n["id"] for n in first[2]} == set(nodes)
    env.tasks(a).create("late", {"prompt": "Late.", "model": "scripted", "gpus": 0, "suspend": True})
    env.tasks(env.b).create("elsewhere", {"prompt": "Not for alice.", "model": "scripted", "gpus": 0,
                                          "suspend": True})
    grown = read_events(stream, 1)[0]  # the watch's ADDED event, pushed: no reload, no polling of the page
    assert grown[1] == "tree"
    late = [n for n in grown[2] if n["id"] == f"{a}/late"]
    assert late and late[0]["depth"] == 0 and not any(n["id"].startswith(f"{env.b}/") for n in grown[2])
    stream.close()


def test_a_task_its_transcript_and_a_message_sent_exactly_once(env: Env, alice_ui: UI) -> None:
    jar = cookie(alice_ui)
    chat = f"{env.a}/chat"
    status, task = get_json(alice_ui, jar, api_task(chat))
    assert status == 200, task
    assert task["id"] == chat and task["phase"] == "done" and task["messages"] == 2 and task["children"] == []
    status, page = get_json(alice_ui, jar, api_task(chat, "/messages?start=0&count=50"))
    assert status == 200
    assert [(m["seq"], m["role"], m["turn_number"]) for m in page["messages"]] == [(0, "user", 0),
                                                                                   (1, "assistant", 0)]
    assert page["messages"][1]["content"] == [{"text": f"ready in {env.a}"}]
    status, water = get_json(alice_ui, jar, api_task(f"{env.a}/water"))
    assert sorted(water["children"]) == [f"{env.a}/water-a", f"{env.a}/water-b"]
    status, tools = get_json(alice_ui, jar, api_task(f"{env.a}/water", "/messages?start=0&count=50"))
    uses = [b["toolUse"] for m in tools["messages"] for b in m["content"] if "toolUse" in b]
    assert [u["name"] for u in uses] == ["spawn_task", "spawn_task"] and uses[0]["input"]["name"] == "a"

    stream = request(alice_ui, "GET", api_task(chat, "/events?from=2"), headers={"Cookie": jar})
    assert stream.status == 200
    assert read_events(stream, 1)[0][1] == "task"
    body = {"text": "hello from the UI", "client_id": f"ui-{uuid.uuid4().hex[:12]}"}
    assert post(alice_ui, jar, api_task(chat, "/messages"), body) == (200, {"queued": True})
    assert post(alice_ui, jar, api_task(chat, "/messages"), body) == (200, {"queued": False})  # a retry: once
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def echoed() -> bool:
        seen.extend(read_events(stream, 1))
        return any(e[1] == "message" and e[2]["role"] == "assistant"
                   and e[2]["content"] == [{"text": "hello from the UI"}] for e in seen)

    wait_for(echoed, timeout=SETTLE, interval=0, what="the echo of the message as a message event")
    messages = [e[2] for e in seen if e[1] == "message"]
    assert [m["seq"] for m in messages] == [2, 3]  # the message, then the answer: no gap, nothing twice
    stream.close()
    wait_for(lambda: env.idle(env.a, "chat", 2), timeout=SETTLE, what="chat Idle after the message")
    assert env.user_texts(chat).count("hello from the UI") == 1
    assert env.inbox_ids(chat).count(f"user:{body['client_id']}") == 1


def test_suspend_resume_and_stop_patch_the_agenttasks_as_the_user(env: Env) -> None:
    from unicore_client.kubectl_plugin.kube import connect
    from unicore_client.ui.cluster_backend import ClusterBackend

    backend = ClusterBackend(connect(kubeconfig=str(env.users["alice"])), env.a).start()
    try:
        tasks = env.tasks(env.a)
        backend.suspend(f"{env.a}/chat")
        wait_for(lambda: tasks.phase("chat") == "Suspended", timeout=60, what="chat Suspended")
        assert (tasks.get("chat") or {})["spec"]["suspend"] is True
        backend.resume(f"{env.a}/chat")
        wait_for(lambda: tasks.phase("chat") == "Idle", timeout=60, what="chat Idle again")
        assert (tasks.get("chat") or {})["spec"]["suspend"] is False
        stopped = backend.stop(f"{env.a}/water")
        assert stopped[0] == f"{env.a}/water" and sorted(stopped[1:]) == [f"{env.a}/water-a", f"{env.a}/water-b"]
        for name in ("water", "water-a", "water-b"):
            assert (tasks.get(name) or {})["spec"]["suspend"] is True
            wait_for(lambda n=name: tasks.phase(n) == "Suspended", timeout=60,  # type: ignore[misc]
                     what=f"{name} Suspended")
        events = backend.events(f"{env.a}/water")
        assert events and all(set(e) == {"time", "type", "reason", "message"} for e in events)
        assert [e["time"] for e in events] == sorted(e["time"] for e in events)
        created = backend.create_from_yaml(yaml.safe_dump({"metadata": {"name": "from-yaml"},
                                                           "spec": {"prompt": "Hi.", "gpus": 0, "suspend": True}}))
        assert created == f"{env.a}/from-yaml" and tasks.get("from-yaml") is not None
    finally:
        backend.close()


def test_all_namespaces_shows_every_namespace_the_user_may_list(env: Env) -> None:
    env.users["admin"] = env.kubeconfig
    ui = start_ui(env, "admin", "--all-namespaces")
    admin_ui = next(ui)
    try:
        status, tree = get_json(admin_ui, cookie(admin_ui), "/api/tree")
        ids = {node["id"] for node in tree["nodes"]}
        assert status == 200 and {f"{env.a}/chat", f"{env.a}/water-a", f"{env.b}/chat"} <= ids
    finally:
        ui.close()


def test_a_user_without_rights_in_the_namespace_gets_a_clear_403(env: Env, bob_ui: UI) -> None:
    jar = cookie(bob_ui)
    status, tree = get_json(bob_ui, jar, "/api/tree")
    assert status == 200 and {n["id"] for n in tree["nodes"]} >= {f"{env.b}/chat"}
    assert not any(n["id"].startswith(f"{env.a}/") for n in tree["nodes"])
    status, own = get_json(bob_ui, jar, api_task(f"{env.b}/chat", "/messages?start=0&count=10"))
    assert status == 200 and own["messages"][1]["content"] == [{"text": f"ready in {env.b}"}]

    chat = f"{env.a}/chat"
    before = env.user_texts(chat), env.store.inbox(chat)
    status, denied = get_json(bob_ui, jar, api_task(chat))
    assert status == 403
    assert denied["error"].startswith(f"forbidden: you cannot get agenttask \"chat\" in namespace {env.a}")
    assert 'User "bob" cannot get resource "agenttasks" in API group "unicore.dev"' in denied["error"]
    status, denied = get_json(bob_ui, jar, api_task(chat, "/messages?start=0&count=10"))
    assert (status, denied["error"]) == (403, (
        f"forbidden: bob cannot get agenttasks/transcript (tasks.unicore.dev) in namespace {env.a}, so cannot read "
        "its agent tasks (ask for the unicore-agenttask-reader role there)"))
    assert request(bob_ui, "GET", api_task(chat, "/events?from=0"), headers={"Cookie": jar}).status == 403
    status, denied = post(bob_ui, jar, api_task(chat, "/messages"), {"text": "let me in", "client_id": "bob-00001"})
    assert status == 403 and denied["error"].startswith("forbidden: bob cannot create agenttasks/messages")
    assert "\n" not in denied["error"]
    logged = (env.tmp / "ui-bob.stderr").read_text()  # a 403 is an answer, not a server error
    assert "Forbidden" not in logged and "ui_backend" not in logged and "task_api" not in logged, logged
    assert (env.user_texts(chat), env.store.inbox(chat)) == before  # nothing read or written in A

    run = subprocess.run(["kubectl", "agenttask", "ui", "--port", "0", "-n", env.a], env=env.plugin_env("bob"),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith(f"error: forbidden: you cannot list agenttasks in namespace {env.a}")
    assert run.stderr.count("\n") == 1 and 'User "bob" cannot list resource "agenttasks"' in run.stderr


def test_a_conversation_created_through_the_task_api_is_read_and_posted_to_from_the_ui(env: Env, alice_ui: UI,
                                                                                        bob_ui: UI) -> None:
    """Issue 33 in cluster mode: alice makes a conversation with a task through the task API; her UI's backend lists
    it, shows the task's live state, posts once per client id and follows the task's answer (posted by the
    operator) in its live feed; the page's URL of it answers through her real UI server; bob's UI gets a 403
    naming the right."""
    from unicore_client.kubectl_plugin.kube import connect
    from unicore_client.kubectl_plugin.proxy import TaskApiClient, conversation_path
    from unicore_client.ui.cluster_backend import ClusterBackend

    a = env.a
    tasks = env.tasks(a)
    tasks.create("talker", {"prompt": "Say you are here.", "model": "scripted", "gpus": 0, "script": {"tasks": {
        "talker": [{"text": "Talker, here."}, {"text": "Talker heard the room."}]}}})
    wait_for(lambda: env.idle(a, "talker"), timeout=SETTLE, what="talker Idle")
    alice = connect(kubeconfig=str(env.users["alice"]))
    made = TaskApiClient(alice).post(conversation_path(a), {"name": "room", "title": "Room", "tasks": ["talker"]})
    assert {p["name"] for p in made["participants"]} == {"alice", "talker"}
    room = f"{a}/room"
    backend = ClusterBackend(alice, a).start()
    stop = threading.Event()
    try:
        listed = backend.conversations()
        assert [(c["id"], c["title"], c["status"], c["agents"], c["people"]) for c in listed] == [
            (room, "Room", "open", ["talker"], ["alice"])]
        shown = backend.conversation(room)
        assert shown["posts"] == listed[0]["posts"] == 2 and shown["created_by"] == "alice"
        states = {p["name"]: p["state"] for p in shown["participants"]}
        assert states == {"alice": "person", "talker": "idle"}
        feed = backend.conversation_events(room, shown["posts"], stop=stop)
        assert next(feed)[1] == "conversation"
        client_id = f"ui-{uuid.uuid4().hex[:12]}"
        assert backend.conversation_post(room, "hello room", client_id) == {"posted": True, "seq": 3}
        assert backend.conversation_post(room, "hello room", client_id) == {"posted": False, "seq": None}  # once
        seen: list[tuple[str, str, dict[str, Any]]] = []

        def answered() -> bool:
            seen.append(next(feed))
            return any(e[1] == "post" and e[2]["kind"] == "answer" for e in seen)

        wait_for(answered, timeout=SETTLE, interval=0, what="talker's answer in the UI's live feed")
        posts = [e[2] for e in seen if e[1] == "post"]
        assert [(p["seq"], p["kind"], p["name"]) for p in posts[:1]] == [(3, "post", "alice")]
        answer = next(p for p in posts if p["kind"] == "answer")
        assert (answer["sender"], answer["name"], answer["text"]) == (f"{a}/talker", "talker", "Talker heard the room.")
        assert [p["text"] for p in backend.conversation_posts(room, 2, 500)].count("hello room") == 1
        assert backend.conversation_control(room, "close") == {"status": "closed", "changed": True}
        with pytest.raises(Conflict, match="closed"):
            backend.conversation_post(room, "too late", f"ui-{uuid.uuid4().hex[:12]}")
    finally:
        stop.set()
        backend.close()

    jar = cookie(alice_ui)
    status, page = get_json(alice_ui, jar, f"/api/conversations/{quote(room, safe='')}")
    assert status == 200 and page["id"] == room and page["status"] == "closed"
    jar = cookie(bob_ui)
    status, denied = get_json(bob_ui, jar, f"/api/conversations/{quote(room, safe='')}")
    assert status == 403 and denied["error"].startswith("forbidden: bob cannot get conversations"), denied
    assert f"in namespace {a}" in denied["error"] and "\n" not in denied["error"]
    status, denied = post(bob_ui, jar, f"/api/conversations/{quote(room, safe='')}/posts",
                          {"text": "let me in", "id": "bob-00000001"})
    assert status == 403 and denied["error"].startswith("forbidden: bob cannot create conversations/posts"), denied


# ---------------------------------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium for this module's page tests (module scope: Playwright's sync API keeps an event loop
    running in the main thread while it is open)."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run hack/bootstrap.sh (it installs Debian's chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox"] if os.geteuid() == 0 else [])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.mark.ui
def test_in_the_browser_a_user_sees_their_tree_and_transcript_and_sends_a_message(env: Env, alice_ui: UI,
                                                                                   page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    from tests.ui.test_ui_browser import screenshot

    a = env.a
    page.goto(alice_ui.url)
    for name in ("water", "water-a", "water-b", "chat"):
        expect(page.locator(f'li[data-task="{a}/{name}"]')).to_be_visible(timeout=30_000)
    expect(page.locator(f'li[data-task^="{env.b}/"]')).to_have_count(0)
    expect(page.locator(f'li[data-task="{a}/water-a"] .meta')).to_contain_text("turns 1")
    screenshot(page, "ui-cluster-tree.png", tmp_path)

    page.get_by_role("link", name=f"{a}/chat", exact=True).click()
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text(f"ready in {a}")
    before = env.user_texts(f"{a}/chat")
    page.get_by_label("Message").fill("sent from the browser")
    page.get_by_role("button", name="Send").click()
    expect(transcript.locator("li.msg.assistant").last).to_contain_text(
        "sent from the browser", timeout=SETTLE * 1000)  # the echo, arrived live (no reload)
    wait_for(lambda: len(env.user_texts(f"{a}/chat")) > len(before), timeout=60, what="the message stored")
    assert env.user_texts(f"{a}/chat").count("sent from the browser") == 1


@pytest.mark.ui
def test_in_the_browser_a_user_without_rights_sees_the_403(env: Env, bob_ui: UI, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    from tests.ui.test_ui_browser import screenshot

    page.goto(bob_ui.url)
    expect(page.locator(f'li[data-task="{env.b}/chat"]')).to_be_visible(timeout=30_000)
    page.goto(bob_ui.base + "/#/task/" + quote(f"{env.a}/chat", safe=""))
    expect(page.locator("#task-error")).to_contain_text(
        f'forbidden: you cannot get agenttask "chat" in namespace {env.a}', timeout=30_000)
    expect(page.locator("#task-error")).to_contain_text('User "bob" cannot get resource "agenttasks"')
    expect(page.locator("#transcript li")).to_have_count(0)
    screenshot(page, "ui-cluster-forbidden.png", tmp_path)


YAML_MANIFEST = """\
apiVersion: unicore.dev/v1alpha1
kind: AgentTask
metadata:
  name: from-page
spec:
  prompt: "Say where you were made."
  gpus: 0
  script:
    default: "Done."
    tasks:
      from-page: [{text: "made from the page's YAML"}]
"""


@pytest.mark.ui
def test_in_the_browser_a_user_suspends_and_resumes_reads_events_and_creates_from_yaml(env: Env, alice_ui: UI,
                                                                                       page: Any) -> None:
    from playwright.sync_api import expect

    a, tasks = env.a, env.tasks(env.a)
    page.goto(alice_ui.url)
    page.get_by_role("link", name=f"{a}/chat", exact=True).click()
    status = page.locator("#task-status")
    expect(status).to_have_attribute("data-phase", "done", timeout=30_000)
    page.get_by_role("button", name="Suspend").click()
    expect(status).to_have_attribute("data-phase", "suspended", timeout=60_000)  # the patch, seen by the watch
    assert (tasks.get("chat") or {})["spec"]["suspend"] is True
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    page.get_by_role("button", name="Resume").click()
    expect(status).to_have_attribute("data-phase", "done", timeout=60_000)
    assert (tasks.get("chat") or {})["spec"]["suspend"] is False

    page.get_by_text("Events", exact=True).click()
    expect(page.locator("#events")).to_contain_text("Turn", timeout=30_000)  # the operator's Events, as alice

    page.get_by_role("link", name="All tasks").click()
    page.get_by_text("New task from YAML").click()
    page.get_by_label("AgentTask manifest").fill(YAML_MANIFEST)
    page.get_by_role("button", name="Create from YAML").click()
    expect(page.locator("#task-title")).to_have_text(f"{a}/from-page")
    expect(page.locator("#transcript")).to_contain_text("made from the page's YAML", timeout=SETTLE * 1000)
    assert (tasks.get("from-page") or {})["spec"]["gpus"] == 0


def test_the_tree_watch_survives_a_dropped_connection_and_an_expired_resource_version(env: Env) -> None:
    """The watch's connection cut and its resourceVersion too old for the API server (410 Gone): it lists again and
    keeps following, with no error left for the page."""
    from unicore_client.kubectl_plugin.kube import connect
    from unicore_client.ui.cluster_watch import TaskWatch

    watch = TaskWatch(connect(kubeconfig=str(env.users["alice"])), env.a)
    watch.start()
    try:
        wait_for(lambda: watch._response is not None, timeout=30, what="the watch request open")
        version = watch.version
        watch._resource_version = "1"  # long compacted away: the next watch is answered 410
        watch._response.shutdown()  # the connection drops
        env.tasks(env.a).create("after-drop", {"prompt": "x", "model": "scripted", "gpus": 0, "suspend": True})
        wait_for(lambda: watch.get(env.a, "after-drop") is not None, timeout=60, what="the new task seen again")
        assert watch.error is None and watch.version > version
        assert int(watch._resource_version) > 1
    finally:
        watch.close()
