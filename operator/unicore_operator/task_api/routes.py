"""The task API's routes, as a Kubernetes aggregated API (group ``tasks.unicore.dev``, version ``v1alpha1``), and a
framework-free dispatcher.

Every task route is a subresource of an AgentTask in its namespace (JSON; errors are Kubernetes ``Status``
objects), reached through the API server with the user's own credentials::

    GET  /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/summary      status, turns, tokens
    GET  /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/tree         the task and its descendants
    GET  /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/transcript   ?since=&limit=&turn=&tools=
    GET  /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/stream       ?after=&wait= (live answers)
    POST /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/messages     {"id": "<uuid>", "text": "..."}
    GET  /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/approvals    calls waiting for a person
    POST /apis/tasks.unicore.dev/v1alpha1/namespaces/{ns}/agenttasks/{name}/approvals    {"callId": "...",
                                                                          "decision": "approve"|"deny", "reason": ""}

Each route names the RBAC verb and subresource it needs (``get agenttasks/transcript``, ``create
agenttasks/messages``, ``get``/``create agenttasks/approvals``, group ``tasks.unicore.dev``): the API server checks
them before it proxies the request, and the operator's server (``server.py``) asks again with a SubjectAccessReview.
The discovery documents the aggregator reads (``/apis``, ``/apis/tasks.unicore.dev``,
``/apis/tasks.unicore.dev/v1alpha1``) list only these subresources, so the bare resource ``agenttasks`` stays the
CRD's (``unicore.dev``) for ``kubectl get agenttasks``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unicore_operator.task_api import conversation_routes as conv
from unicore_operator.task_api.approval_routes import APPROVALS, get_approvals, post_decision
from unicore_operator.task_api.authz import Attributes
from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.service import TaskApi, log
from unicore_operator.task_api.stream import STREAM, get_stream

GROUP = "tasks.unicore.dev"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "agenttasks"
PREFIX = f"/apis/{GROUP_VERSION}"

_TASK = re.compile(
    rf"^{re.escape(PREFIX)}/namespaces/(?P<namespace>[^/]+)/{RESOURCE}/(?P<name>[^/]+)/(?P<subresource>[^/]+)$"
)


@dataclass
class ApiResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), default=str).encode()

    @property
    def content_type(self) -> str:
        return "application/json"


# (api, namespace, name, query, body, sender) -> (status, payload); ``sender``: the authenticated user, as stored
Handler = Callable[[TaskApi, str, str, str, bytes, str], tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class Route:
    subresource: str  # "" for the resource itself (conversations)
    method: str
    verb: str  # the RBAC verb the API server derives from the method
    kind: str  # the answer's kind (discovery)
    handler: Handler = field(compare=False)
    doc: str = ""
    resource: str = RESOURCE
    collection: bool = False  # the namespace's collection (no name in the path): list, create


ROUTES: tuple[Route, ...] = (
    Route("summary", "GET", "get", "TaskSummary",
          lambda api, ns, name, q, b, sender: api.get_task(ns, name), "status, turns, tokens, last response"),
    Route("tree", "GET", "get", "TaskTree",
          lambda api, ns, name, q, b, sender: api.get_tree(ns, name), "the task and its descendants (bounded)"),
    Route("transcript", "GET", "get", "TranscriptPage",
          lambda api, ns, name, q, b, sender: api.get_transcript(ns, name, q),
          "a page of messages: ?since=<seq>&limit=<n>&turn=<n>&tools=true"),
    Route(STREAM, "GET", "get", "TokenStream",
          lambda api, ns, name, q, b, sender: get_stream(api, ns, name, q),
          "the model's answers as they are written (live; a long poll): ?after=<entry id>&wait=<seconds>"),
    Route("messages", "POST", "create", "MessageReceipt",
          lambda api, ns, name, q, b, sender: api.post_message(ns, name, b, sender=sender),
          'queue a message, exactly once per id: {"id": "<uuid>", "text": "..."}'),
    Route(APPROVALS, "GET", "get", "ApprovalList",
          lambda api, ns, name, q, b, sender: get_approvals(api, ns, name),
          "tool calls waiting for a person (approvals, questions) and the decisions on them"),
    Route(APPROVALS, "POST", "create", "ApprovalReceipt",
          lambda api, ns, name, q, b, sender: post_decision(api, ns, name, b, sender=sender),
          'approve or deny a tool call (once): {"callId": "<id>", "decision": "approve"|"deny", "reason": "..."}'),
    # shared conversations (conversation_routes.py)
    Route("", "GET", "list", "ConversationList", lambda api, ns, name, q, b, sender: conv.list_conversations(api, ns),
          "the namespace's conversations", conv.RESOURCE, collection=True),
    Route("", "POST", "create", "Conversation", lambda api, ns, name, q, b, sender: conv.create(api, ns, b, sender),
          'create one: {"name", "title", "handoffLimit", "tasks": [...]}', conv.RESOURCE, collection=True),
    Route("", "GET", "get", "Conversation", lambda api, ns, name, q, b, sender: conv.get(api, ns, name, q),
          "its participants and posts: ?after=<seq>", conv.RESOURCE),
    Route("", "DELETE", "delete", "Status", lambda api, ns, name, q, b, sender: conv.delete(api, ns, name),
          "remove it with its posts", conv.RESOURCE),
    Route("posts", "GET", "get", "ConversationPosts",
          lambda api, ns, name, q, b, sender: conv.get_posts(api, ns, name, q),
          "posts after ?after=<seq>, waiting up to ?wait=<seconds> (a long poll)", conv.RESOURCE),
    Route("posts", "POST", "create", "PostReceipt",
          lambda api, ns, name, q, b, sender: conv.post(api, ns, name, b, sender),
          'post as yourself, once per id: {"id": "<client id>", "text": "..."}', conv.RESOURCE),
    Route("members", "POST", "create", "MemberReceipt",
          lambda api, ns, name, q, b, sender: conv.members(api, ns, name, b),
          'a task joins or leaves: {"task": "<name>", "action": "join"|"leave"}', conv.RESOURCE),
    Route("control", "POST", "create", "ControlReceipt",
          lambda api, ns, name, q, b, sender: conv.control(api, ns, name, b, sender),
          '{"action": "pause"|"resume"|"close"}', conv.RESOURCE),
)
_CONVERSATION = re.compile(
    rf"^{re.escape(PREFIX)}/namespaces/(?P<namespace>[^/]+)/{conv.RESOURCE}(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


@dataclass(frozen=True)
class Target:
    """A request for one route of one task."""

    route: Route
    namespace: str
    name: str

    def attributes(self) -> Attributes:
        return Attributes(verb=self.route.verb, namespace=self.namespace, name=self.name,
                          subresource=self.route.subresource, group=GROUP, version=VERSION,
                          resource=self.route.resource)


def _resolve_conversation(method: str, match: re.Match[str], path: str) -> Target:
    name, sub = match["name"] or "", match["sub"] or ""
    routes = [r for r in ROUTES if r.resource == conv.RESOURCE and r.collection == (not name) and r.subresource == sub]
    if not routes:
        raise ApiError(404, f"no task API route for {method} {path}; see GET {PREFIX}")
    for route in routes:
        if route.method == method.upper():
            return Target(route, match["namespace"], name)
    allowed = ", ".join(sorted({route.method for route in routes}))
    raise ApiError(405, f"{method} is not allowed on {path} (use {allowed})")


def resolve(method: str, path: str) -> Target:
    """The route of ``method path`` (the path without the query); ApiError 404 or 405 when there is none."""
    conversation = _CONVERSATION.match(path.rstrip("/"))
    if conversation is not None:
        return _resolve_conversation(method, conversation, path)
    match = _TASK.match(path.rstrip("/"))
    if match is None:
        raise ApiError(404, f"no task API route for {method} {path}; see GET {PREFIX}")
    sub = match["subresource"]
    routes = [route for route in ROUTES if route.resource == RESOURCE and route.subresource == sub]
    if not routes:
        raise ApiError(404, f"agenttasks have no subresource {sub!r} here (they have "
                            f"{', '.join(dict.fromkeys(r.subresource for r in ROUTES if r.resource == RESOURCE))})")
    for route in routes:
        if route.method == method.upper():
            return Target(route, match["namespace"], match["name"])
    allowed = ", ".join(sorted({route.method for route in routes}))
    raise ApiError(405, f"{method} is not allowed on {path} (use {allowed})")


def _version_entry() -> dict[str, str]:
    return {"groupVersion": GROUP_VERSION, "version": VERSION}


def _group() -> dict[str, Any]:
    return {"name": GROUP, "versions": [_version_entry()], "preferredVersion": _version_entry()}


def _resources() -> list[dict[str, Any]]:
    """One APIResource per subresource, with the verbs of all its routes (``approvals``: get and create; the kind
    of its first route)."""
    found: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        name = f"{route.resource}/{route.subresource}" if route.subresource else route.resource
        entry = found.setdefault(name, {
            "name": name, "singularName": "", "namespaced": True, "kind": route.kind, "verbs": []})
        if route.verb not in entry["verbs"]:
            entry["verbs"].append(route.verb)
    return list(found.values())


def discovery(path: str) -> dict[str, Any] | None:
    """The discovery document at ``path`` (``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``), else None."""
    path = path.rstrip("/")
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group()]}
    if path == f"/apis/{GROUP}":
        return {"kind": "APIGroup", "apiVersion": "v1", **_group()}
    if path == PREFIX:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": GROUP_VERSION,
            "resources": _resources(),
        }
    return None


def openapi(path: str) -> dict[str, Any] | None:
    """Minimal OpenAPI documents (``/openapi/v2``, ``/openapi/v3`` and its group version), so the aggregator's
    OpenAPI controllers find a valid, empty spec instead of retrying a 404; the routes are described by discovery."""
    info = {"title": "UniCore task API", "version": VERSION}
    if path == "/openapi/v2":
        return {"swagger": "2.0", "info": info, "paths": {}}
    if path == "/openapi/v3":
        return {"paths": {f"apis/{GROUP_VERSION}": {"serverRelativeURL": f"/openapi/v3/apis/{GROUP_VERSION}"}}}
    if path == f"/openapi/v3/apis/{GROUP_VERSION}":
        return {"openapi": "3.0.0", "info": info, "paths": {}}
    return None


def dispatch(api: TaskApi, target: Target, query: str = "", body: bytes = b"", *, sender: str) -> ApiResponse:
    """Answer one request already authenticated (``sender``: the user, as the message's stored sender) and
    authorized. Never raises: unexpected errors become a 500 Status (and are logged)."""
    route = target.route
    try:
        status, payload = route.handler(api, target.namespace, target.name, query, body, sender)
        return ApiResponse(status, payload)
    except ApiError as exc:
        return error_response(exc)
    except Exception:
        log.exception("task API %s %s of %s/%s failed", route.method, route.subresource, target.namespace,
                      target.name)
        return ApiResponse(500, ApiError(500, f"internal error answering {route.method} {route.subresource} of "
                                              f"{target.namespace}/{target.name}; see the operator log").body())


def answer(api: TaskApi, method: str, path: str, query: str = "", body: bytes = b"", *, sender: str) -> ApiResponse:
    """``resolve`` + ``dispatch`` (an unknown route answers 404 or 405): the whole API of an authenticated and
    authorized caller, without HTTP."""
    try:
        target = resolve(method, path)
    except ApiError as exc:
        return error_response(exc)
    return dispatch(api, target, query, body, sender=sender)


def error_response(exc: ApiError) -> ApiResponse:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else {}
    return ApiResponse(exc.status, exc.body(), headers)
