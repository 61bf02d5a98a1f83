"""The operator's admission webhook (``unicore_operator.admission``) on a real Redis: the verdicts on child AgentTasks,
the AdmissionReview it answers over TLS, and the create handler's reservation of the child's slots."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from unicore.api.spec import parse_spec, to_task_spec
from unicore.store.slots import SpawnSlots
from unicore.store.tasks import TaskStore
from unicore_operator import admission
from unicore_operator.apiserver_auth import Authentication
from unicore_operator.context import OperatorContext
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings

from tests.integration.apiserver_tls import ApiServerPki, make_pki

NS = "team-a"


class FakeKube:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def get_agenttask(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))


def agenttask(name: str, spec: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "labels": {}}, "spec": spec}


def make_ctx(redis_url: str, indexed: dict[tuple[str, str], dict[str, Any]],
             api: dict[tuple[str, str], dict[str, Any]] | None = None) -> OperatorContext:
    state = RedisState(redis_url)
    ctx = OperatorContext(settings=OperatorSettings(redis_url=redis_url, namespaces=(NS,)), redis=state,
                          kube=FakeKube(api or {}), store=TaskStore(state.sync),  # type: ignore[arg-type]
                          agenttasks={key: [body] for key, body in indexed.items()})
    ctx.ready.set()
    return ctx


def review_of(name: str, spec: dict[str, Any], *, namespace: str = NS, operation: str = "CREATE") -> dict[str, Any]:
    return {"uid": f"review-{name}", "operation": operation, "namespace": namespace, "name": name,
            "object": {"apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
                       "metadata": {"name": name, "namespace": namespace}, "spec": spec},
            "userInfo": {"username": "alice"}}


@pytest.fixture
def parent(redis_url: str) -> dict[str, Any]:
    """The root AgentTask p and its record as the operator stores it (the settings a child is checked against come
    from the AgentTask, ``parent_view``; the record only has to exist)."""
    spec = {"prompt": "go", "tools": ["read_file", "spawn_task", "task_status"], "childTools": ["read_file"],
            "limits": {"maxChildren": 2, "maxDescendants": 3, "tokenBudget": 1000}}
    TaskStore.from_url(redis_url).create_task(to_task_spec(NS, "p", parse_spec(spec), None))
    return agenttask("p", spec)


def verdict(ctx: OperatorContext, name: str, spec: dict[str, Any], **kw: Any) -> admission.Verdict:
    async def run() -> admission.Verdict:
        try:
            return await admission.review(ctx, review_of(name, spec, **kw))
        finally:
            await ctx.redis.close()

    return asyncio.run(run())


def test_a_narrowing_child_is_allowed_and_a_widening_one_refused(redis_url: str, parent: dict[str, Any]) -> None:
    indexed = {(NS, "p"): parent}
    ok = verdict(make_ctx(redis_url, indexed), "p-a", {"parentRef": {"name": "p"}, "tools": ["read_file"]})
    assert ok.allowed, ok.message
    wide = verdict(make_ctx(redis_url, indexed), "p-b",
                   {"parentRef": {"name": "p"}, "limits": {"maxDescendants": 10, "tokenBudget": 0}})
    assert not wide.allowed
    assert wide.message.startswith("AgentTask team-a/p-b may only narrow its parent team-a/p: ")
    assert "maxDescendants 10 is above its parent's 3" in wide.message
    assert "tokenBudget 0 (unlimited) is above its parent's 1,000" in wide.message
    tools = verdict(make_ctx(redis_url, indexed), "p-c", {"parentRef": {"name": "p"}, "tools": ["task_status"]})
    assert not tools.allowed and "spec.tools names task_status, not among its parent's childTools" in tools.message


def test_the_parent_must_exist_in_the_childs_namespace(redis_url: str, parent: dict[str, Any]) -> None:
    indexed = {(NS, "p"): parent}
    missing = verdict(make_ctx(redis_url, indexed), "q-a", {"parentRef": {"name": "q"}})
    assert not missing.allowed and "parent AgentTask team-a/q does not exist" in missing.message
    other = verdict(make_ctx(redis_url, indexed), "p-a", {"parentRef": {"name": "p", "namespace": "team-b"}})
    assert not other.allowed and "own namespace (team-a)" in other.message
    unwatched = verdict(make_ctx(redis_url, indexed), "p-a", {"parentRef": {"name": "p"}}, namespace="team-b")
    assert not unwatched.allowed and "does not watch namespace team-b" in unwatched.message
    # not in the index yet (created a moment ago): the API has it
    found = verdict(make_ctx(redis_url, {}, api={(NS, "p"): parent}), "p-a", {"parentRef": {"name": "p"}})
    assert found.allowed, found.message
    # a child named by generateName is checked all the same
    generated = review_of("", {"parentRef": {"name": "p"}})
    generated["object"]["metadata"] = {"generateName": "p-", "namespace": NS}

    async def by_generate_name() -> admission.Verdict:
        ctx = make_ctx(redis_url, indexed)
        try:
            return await admission.review(ctx, generated)
        finally:
            await ctx.redis.close()

    assert asyncio.run(by_generate_name()).allowed
    # roots are not the webhook's business
    assert verdict(make_ctx(redis_url, {}), "r", {"prompt": "go"}).allowed


def test_a_full_tree_refuses_more_children_but_not_those_holding_a_slot(redis_url: str,
                                                                         parent: dict[str, Any]) -> None:
    slots = SpawnSlots(TaskStore.from_url(redis_url).redis)
    for child in ("p-x", "p-y"):
        slots.reserve(parent_id=f"{NS}/p", root_id=f"{NS}/p", child_id=f"{NS}/{child}", max_children=2,
                      max_descendants=3)
    indexed = {(NS, "p"): parent}
    full = verdict(make_ctx(redis_url, indexed), "p-z", {"parentRef": {"name": "p"}})
    assert not full.allowed
    assert "does not fit in its tree: maximum children reached: team-a/p already has 2" in full.message
    # the spawner reserved before it created: that child passes
    assert verdict(make_ctx(redis_url, indexed), "p-y", {"parentRef": {"name": "p"}}).allowed


def test_the_create_handler_refuses_and_reserves(redis_url: str, parent: dict[str, Any]) -> None:
    async def vet(name: str, spec: dict[str, Any]) -> str | None:
        ctx = make_ctx(redis_url, {(NS, "p"): parent})
        try:
            return (await admission.vet_new_child(ctx, NS, name, agenttask(name, spec), parse_spec(spec))).refusal
        finally:
            await ctx.redis.close()

    assert asyncio.run(vet("p-a", {"parentRef": {"name": "p"}})) is None
    assert asyncio.run(vet("p-a", {"parentRef": {"name": "p"}})) is None  # idempotent by child
    refused = asyncio.run(vet("p-w", {"parentRef": {"name": "p"}, "limits": {"maxIterations": 10_000}}))
    assert refused is not None and "maxIterations 10000 is above its parent's 250" in refused
    assert asyncio.run(vet("p-b", {"parentRef": {"name": "p"}})) is None
    full = asyncio.run(vet("p-c", {"parentRef": {"name": "p"}}))
    assert full is not None and "maximum children reached" in full
    held = SpawnSlots(TaskStore.from_url(redis_url).redis).held(f"{NS}/p")
    assert held == {"children": 2, "descendants": 2}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_and_post(ctx: OperatorContext, auth: Authentication, tls: ApiServerPki,
                   calls: list[tuple[str | None, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]] | Exception]:
    """Serve the webhook with ``auth``; post each review with the named client certificate (None: none); the
    answers (status, body), or the exception a client got (a failed handshake)."""
    port = free_port()

    def post(cert: str | None, review: dict[str, Any]) -> tuple[int, dict[str, Any]] | Exception:
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": review})
        request = urllib.request.Request(f"https://127.0.0.1:{port}{admission.PATH}", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=tls.client_context(cert), timeout=10) as answer:  # noqa: S310
                return answer.status, dict(json.load(answer))
        except urllib.error.HTTPError as exc:
            return exc.code, dict(json.loads(exc.read() or b"{}"))
        except (urllib.error.URLError, ConnectionError, ssl.SSLError) as exc:
            return exc

    async def run() -> list[tuple[int, dict[str, Any]] | Exception]:
        server = asyncio.create_task(admission.serve(ctx, port, auth, None, host="127.0.0.1"))
        try:
            for _ in range(100):  # the site is up once a connection is accepted
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                break
            return [await asyncio.to_thread(post, cert, review) for cert, review in calls]
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
            await ctx.redis.close()

    return asyncio.run(run())


def test_the_webhook_answers_the_api_servers_admission_reviews_over_tls(redis_url: str, parent: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    tls = make_pki(tmp_path)
    ok, refused = serve_and_post(make_ctx(redis_url, {(NS, "p"): parent}), Authentication(tls.cert_dir, tls.config),
                                 tls, [("front-proxy", review_of("p-a", {"parentRef": {"name": "p"}})),
                                       ("front-proxy", review_of("p-b", {"parentRef": {"name": "p"},
                                                                         "limits": {"maxChildren": 3}}))])
    assert not isinstance(ok, Exception) and not isinstance(refused, Exception)
    assert ok[0] == 200 and ok[1]["kind"] == "AdmissionReview"
    assert ok[1]["response"] == {"uid": "review-p-a", "allowed": True}
    answer = refused[1]["response"]
    assert answer["uid"] == "review-p-b" and answer["allowed"] is False
    assert answer["status"]["code"] == 403
    assert "spec.limits.maxChildren 3 is above its parent's 2" in answer["status"]["message"]


@pytest.mark.parametrize(("cert", "fragment"), [
    (None, "no client certificate"),
    ("front-proxy-ca-alice", "common name 'alice' is not one of requestheader-allowed-names"),
    ("user-ca", None),  # another CA: the handshake fails
])
def test_anyone_but_the_api_server_learns_nothing_from_the_webhook(redis_url: str, parent: dict[str, Any],
                                                                    tmp_path: Path, cert: str | None,
                                                                    fragment: str | None) -> None:
    """A pod that reaches the webhook's port cannot ask whether a task exists in another namespace or what it
    allows (issue 25, 7): without the API server's client certificate it gets 401 and no verdict."""
    tls = make_pki(tmp_path)
    probes = [review_of("p-x", {"parentRef": {"name": "p"}, "limits": {"maxChildren": 3}}),  # "above its parent's 2"
              review_of("p-y", {"parentRef": {"name": "nope"}})]  # "does not exist"
    answers = serve_and_post(make_ctx(redis_url, {(NS, "p"): parent}), Authentication(tls.cert_dir, tls.config),
                             tls, [(cert, probe) for probe in probes])
    for answer in answers:
        if fragment is None:
            assert isinstance(answer, Exception), answer
            continue
        assert not isinstance(answer, Exception), answer
        status, body = answer
        assert status == 401 and fragment in body["error"] and "response" not in body, body


def test_without_client_authentication_any_tls_client_is_answered(redis_url: str, parent: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """UNICORE_WEBHOOK_CLIENT_AUTH=none, for a control plane that cannot present a certificate to webhooks."""
    tls = make_pki(tmp_path)
    (answer,) = serve_and_post(make_ctx(redis_url, {(NS, "p"): parent}), Authentication(tls.cert_dir, None), tls,
                               [(None, review_of("p-a", {"parentRef": {"name": "p"}}))])
    assert not isinstance(answer, Exception) and answer[1]["response"] == {"uid": "review-p-a", "allowed": True}
