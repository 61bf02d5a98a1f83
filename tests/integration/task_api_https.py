"""The aggregated task API's HTTPS server over a real Redis with real TLS (``apiserver_tls``): two namespaces with a
task ``demo`` each, and a stand-in for the API server's authorizer (a policy table: alice may use team-a only, bob
may read team-a's transcripts), recording every SubjectAccessReview it answers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore_operator.task_api.authz import Authorizer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.server import Authentication, build_app, serve
from unicore_operator.task_api.service import TaskApi

from tests.integration.apiserver_tls import ApiServerPki, make_pki, serving

API = "/apis/tasks.unicore.dev/v1alpha1"
ALLOWED = {("alice", "team-a")}  # who may do anything in which namespace (the stand-in authorizer's table)
READS = {("bob", "team-a", "transcript")}  # who may do only this (an older reader role, without agenttasks/stream)


@dataclass
class Server:
    port: int
    pki: ApiServerPki
    reviews: list[dict[str, Any]]
    store: TaskStore

    @property
    def ca(self) -> Path:
        return self.pki.ca

    @property
    def certs(self) -> dict[str, Any]:
        return self.pki.certs

    def call(self, method: str, path: str, *, cert: str | None = "front-proxy", headers: dict[str, str] | None = None,
             body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, context=self.pki.client_context(cert), timeout=10) as answer:  # noqa: S310
                return answer.status, dict(json.load(answer))
        except urllib.error.HTTPError as exc:
            return exc.code, dict(json.loads(exc.read() or b"{}"))


@contextmanager
def task_api_server(redis_url: str, tmp_path: Path) -> Iterator[Server]:
    tls = make_pki(tmp_path)
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    for namespace in ("team-a", "team-b"):
        store.create_task(TaskSpec(id=f"{namespace}/demo", prompt=f"hello from {namespace}"))
    objects = [{"metadata": {"namespace": ns, "name": "demo"}} for ns in ("team-a", "team-b")]
    reviews: list[dict[str, Any]] = []

    def review(path: str, body: dict[str, Any]) -> dict[str, Any]:
        reviews.append(body)
        spec = body["spec"]
        where = spec["resourceAttributes"]
        allowed = (spec["user"], where["namespace"]) in ALLOWED or (
            spec["user"], where["namespace"], where["subresource"]) in READS
        return {**body, "status": {"allowed": allowed}}

    app = build_app(TaskApi(store, static_lookup(lambda: objects)), Authentication(tls.cert_dir, tls.config),
                    Authorizer(review))
    with serving(lambda port: serve(app, port, None, host="127.0.0.1")) as port:
        yield Server(port, tls, reviews, store)
