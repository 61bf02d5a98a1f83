"""``kubectl agenttask conv ...``: shared conversations (issue 33) on a cluster, through the task API's resource
``conversations`` (group ``tasks.unicore.dev``, namespaced; ``task_api/conversation_routes.py``), with the verbs and
the output of local mode's ``unicore conv`` (``unicore_client.local.conversation_command``):

    kubectl agenttask conv create NAME [--title T] [--task TASK]... [--handoff-limit N]
    kubectl agenttask conv join NAME TASK...          kubectl agenttask conv leave NAME TASK...
    kubectl agenttask conv post NAME TEXT [--id ID]
    kubectl agenttask conv show NAME [--json] [--follow [--timeout S] [--no-tokens]]
    kubectl agenttask conv pause|resume|close|delete NAME
    kubectl agenttask conv list

The person is the user the API server authenticated (never a name the command gives); the tasks are AgentTasks of
the conversation's namespace (``-n``). A post is taken once per id (``--id``; default a new one), so a retried
request posts once. The operator delivers posts and runs the turns they start: ``post`` returns at once (``show
--follow`` prints what follows: new posts, and the agents' answers as they are written, ``<name> (live): ...``;
``unicore_client.kubectl_plugin.conversation_follow``). RBAC: ``get``/``list conversations`` and ``get
conversations/posts`` to read (and ``get agenttasks/stream`` for the live answers), ``create conversations`` (and
``/posts``, ``/members``, ``/control``) to take part (the chart's reader and messenger roles), ``delete
conversations`` to delete (the editor role: ``edit``, ``admin``). Text from people and models is printed with
``printable``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import IO, Any

from unicore import conversations as rules
from unicore.api.schema import MAX_TASK_NAME, task_name, user_message_id
from unicore.terminal import printable

from unicore_client.kubectl_plugin.conversation_follow import WAIT_SECONDS as FOLLOW_WAIT_SECONDS
from unicore_client.kubectl_plugin.conversation_follow import ConversationFollower
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import KubeContext
from unicore_client.kubectl_plugin.proxy import DEFAULT_TIMEOUT_SECONDS, TaskApiClient, conversation_path

POSTS_PAGE = 500  # the most posts one answer holds (conversation_routes.POSTS_PAGE): a full page means more
MAX_TITLE_CHARS = 256
MAX_TASKS = 64
MAX_POST_ID_CHARS = 256
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
AGENTTASK_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")  # a Kubernetes object name (DNS-1123 subdomain)
LABELS = {"answer": "answered", "post": "posted", "note": "note", "joined": "joined", "left": "left"}
STATUSES = {"pause": "paused", "resume": "open", "close": "closed"}


# ------------------------------------------------------------------------------------------------ arguments


def _utf8(text: str, what: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{what} is not valid UTF-8 text") from None
    return text


def conversation_name(text: str) -> str:
    """An argparse ``type``: a conversation's name (``rules.check_name``)."""
    try:
        return rules.check_name(_utf8(text, "the name"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def agenttask_name(text: str) -> str:
    if len(text) > MAX_TASK_NAME or not AGENTTASK_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not an agenttask name: {text[:80]!r} (a Kubernetes object name: lowercase "
                                         "letters, digits, '-' and '.')")
    return text


def post_id(text: str) -> str:
    """An argparse ``type``: a post id a person may choose (``schema.user_message_id``), 1-256 characters."""
    _utf8(text, "the id")
    if not text or len(text) > MAX_POST_ID_CHARS:
        raise argparse.ArgumentTypeError(f"must be 1-{MAX_POST_ID_CHARS} characters")
    try:
        return user_message_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).splitlines()[0]) from None


def title(text: str) -> str:
    _utf8(text, "the title")
    if len(text) > MAX_TITLE_CHARS:
        raise argparse.ArgumentTypeError(f"is {len(text)} characters, over the cap of {MAX_TITLE_CHARS}")
    return text


def handoff_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if not 0 <= value <= rules.MAX_HANDOFF_LIMIT:
        raise argparse.ArgumentTypeError(f"must be from 0 to {rules.MAX_HANDOFF_LIMIT}, not {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text[:40]!r}")
    return value


def post_text(text: str) -> str:
    return _utf8(text, "the post")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with arguments argparse cannot check one by one (one line), or None."""
    if args.conv_command == "post":
        text = " ".join(args.text)
        if not text.strip():
            return "conv post: the post is empty"
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:  # words after an option (main.parse) come without argparse's check
            return "conv post: the post is not valid UTF-8 text"
        if size > rules.MAX_POST_BYTES:
            return f"conv post: the post is {size} bytes, over the cap of {rules.MAX_POST_BYTES} bytes"
    if args.conv_command == "create" and len(args.task or []) > MAX_TASKS:
        return f"conv create: {len(args.task)} tasks: at most {MAX_TASKS} join when it is created (add more with join)"
    return None


# ------------------------------------------------------------------------------------------------ rendering


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def render_post(post: Mapping[str, Any]) -> str:
    """``#<seq> <who> <what>: <text>`` (as ``unicore conv``): a person by name, a task as ``<name> (agent)``."""
    sender = _text(post.get("sender"))
    who = {"user": sender, "task": f"{task_name(sender)} (agent)"}.get(_text(post.get("senderKind")), "-")
    kind = _text(post.get("kind"))
    return (f"#{printable(post.get('seq'), multiline=False)} {printable(who, multiline=False)} "
            f"{printable(LABELS.get(kind, kind), multiline=False)}: {printable(_text(post.get('text')))}\n")


def render_participants(participants: Sequence[Mapping[str, Any]]) -> str:
    return printable(", ".join(
        f"{_text(m.get('name'))}{' (agent)' if m.get('kind') == 'task' else ''}{' (left)' if m.get('left') else ''}"
        for m in participants), multiline=False)


def render_conversation(conversation: Mapping[str, Any]) -> str:
    """``show``: ``conversation <ns>/<name>: <title> [<status>]``, the participants, then every post."""
    meta = conversation.get("metadata") or {}
    where = f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}"
    head = printable(f"conversation {where}: {_text(conversation.get('title'))} [{_text(conversation.get('status'))}]",
                     multiline=False)
    lines = [f"{head}\n", f"participants: {render_participants(conversation.get('participants') or [])}\n"]
    lines.extend(render_post(post) for post in conversation.get("posts") or [])
    return "".join(lines)


def render_list(answer: Mapping[str, Any], namespace: str) -> str:
    """``list``: ``<name>  [<status>]  posts=<n>  <title>`` per conversation of the namespace."""
    items = answer.get("items") or []
    if not items:
        return f"no conversations in namespace {printable(namespace, multiline=False)}\n"
    return "".join(printable(f"{_text(item.get('name'))}  [{_text(item.get('status'))}]  "
                             f"posts={_text(item.get('posts'))}  {_text(item.get('title'))}", multiline=False) + "\n"
                   for item in items)


def active_names(conversation: Mapping[str, Any]) -> list[str]:
    return [_text(m.get("name")) for m in conversation.get("participants") or [] if not m.get("left")]


# ------------------------------------------------------------------------------------------------ commands


def _api(kube: KubeContext) -> TaskApiClient:
    return TaskApiClient(kube, timeout=DEFAULT_TIMEOUT_SECONDS)


def cmd_create(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    body = {"name": args.name, "title": args.title or "", "handoffLimit": args.handoff_limit,
            "tasks": list(args.task or [])}
    status, made = _api(kube).post_with_status(conversation_path(kube.namespace), body)
    if status == 200:
        print(f"note: conversation {args.name} exists: kept as it is", file=sys.stderr)
    out.write(printable(f"conversation {args.name}: {', '.join(active_names(made))}", multiline=False) + "\n")
    return 0


def cmd_members(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    api = _api(kube)
    path = conversation_path(kube.namespace, args.name, "members")
    said = {"join": ("joined", "takes part already"), "leave": ("left", "did not take part")}[args.conv_command]
    for task in args.tasks:
        receipt = api.post(path, {"task": task, "action": args.conv_command})
        out.write(f"{task} {said[0] if receipt.get('changed') else said[1]}\n")
        out.flush()
    return 0


def cmd_post(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    client_id = args.id or uuid.uuid4().hex
    api = _api(kube)
    receipt = api.post(conversation_path(kube.namespace, args.name, "posts"),
                       {"id": client_id, "text": " ".join(args.text)})
    if receipt.get("duplicate") and args.id is None:  # a new id: an earlier try of this request was taken
        out.write(f"posted to {args.name} (by a retried request: once)\n")
        return 0
    if receipt.get("duplicate"):
        out.write(printable(f"post {client_id} was posted before: not again", multiline=False) + "\n")
        return 0
    seq = int(receipt.get("seq") or 0)
    out.write(f"posted #{seq} to {args.name}\n")
    try:  # a paused conversation keeps the post: say so (reading it is a right of its own; a note only)
        status = TaskApiClient(kube, timeout=5.0).get(
            conversation_path(kube.namespace, args.name, "posts"), [("after", seq)]).get("status")
    except PluginError:
        return 0
    if status == "paused":
        print(f"note: conversation {args.name} is paused: post #{seq} is delivered when it is resumed "
              f"(kubectl agenttask conv resume {args.name})", file=sys.stderr)
    return 0


def read_all(api: TaskApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The conversation with every post (one answer holds ``POSTS_PAGE``: the rest is read page by page)."""
    conversation = api.get(conversation_path(namespace, name))
    posts = list(conversation.get("posts") or [])
    page = posts
    while len(page) >= POSTS_PAGE:
        answer = api.get(conversation_path(namespace, name, "posts"), [("after", int(page[-1].get("seq") or 0))])
        page = list(answer.get("posts") or [])
        posts.extend(page)
    return {**conversation, "posts": posts}


def cmd_show(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    api = _api(kube)
    try:
        conversation = read_all(api, kube.namespace, args.name)
        if args.json:
            out.write(json.dumps(conversation, indent=2) + "\n")
        else:
            out.write(render_conversation(conversation))
        out.flush()
        if not args.follow or conversation.get("status") == "closed":
            return 0
        posts = conversation.get("posts") or []
        follow(api, kube.namespace, args.name, int(posts[-1].get("seq") or 0) if posts else 0, out,
               timeout=args.timeout, as_json=args.json, participants=conversation.get("participants") or [],
               tokens=not args.no_tokens)
    except KeyboardInterrupt:
        return 0
    return 0


def follow(api: TaskApiClient, namespace: str, name: str, after: int, out: IO[str], *, timeout: float | None,
           as_json: bool = False, participants: Sequence[Mapping[str, Any]] = (), tokens: bool = True,
           wait_seconds: int = FOLLOW_WAIT_SECONDS) -> None:
    """Print the posts after ``after`` as they come (a long poll of ``posts``) and the live answers of the task
    ``participants`` that have not left (``tokens``), until the conversation is closed or ``timeout`` seconds have
    passed (``--json``: one JSON object a line; ``conversation_follow``)."""
    ConversationFollower(api, namespace, name, after=after, participants=participants, out=out,
                         render_post=render_post, as_json=as_json, tokens=tokens,
                         wait_seconds=wait_seconds).run(timeout)


def cmd_status(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    receipt = _api(kube).post(conversation_path(kube.namespace, args.name, "control"), {"action": args.conv_command})
    status = printable(receipt.get("status") or STATUSES[args.conv_command], multiline=False)
    out.write(f"conversation {args.name} {'is now' if receipt.get('changed') else 'was already'} {status}\n")
    return 0


def cmd_delete(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    _api(kube).delete(conversation_path(kube.namespace, args.name))
    out.write(f"conversation {args.name} deleted\n")
    return 0


def cmd_list(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    out.write(render_list(_api(kube).get(conversation_path(kube.namespace)), kube.namespace))
    return 0


# ------------------------------------------------------------------------------------------------ parsers


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``kubectl agenttask conv ACTION ...``; ``-n`` and the connection flags anywhere."""
    conv = sub.add_parser("conv", parents=[common], help="shared conversations: agents and people in one thread",
                          description="Shared conversations (the task API's conversations) in the namespace.")
    actions = conv.add_subparsers(dest="conv_command", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[common], help="create a conversation (you take part) with tasks")
    create.add_argument("name", type=conversation_name)
    create.add_argument("--title", type=title, help="default: the name")
    create.add_argument("--task", action="append", metavar="TASK", type=agenttask_name,
                        help="an agenttask of the namespace that takes part (repeatable)")
    create.add_argument("--handoff-limit", type=handoff_limit, default=rules.DEFAULT_HANDOFF_LIMIT, metavar="N",
                        help=f"agent-to-agent hand-offs per person's post (default {rules.DEFAULT_HANDOFF_LIMIT})")
    create.set_defaults(func=cmd_create)

    for verb, text in (("join", "add agenttasks (they get the posts made from now on)"),
                       ("leave", "take agenttasks out (they get no more posts)")):
        action = actions.add_parser(verb, parents=[common], help=text)
        action.add_argument("name", type=conversation_name)
        action.add_argument("tasks", nargs="+", metavar="TASK", type=agenttask_name)
        action.set_defaults(func=cmd_members)

    post = actions.add_parser("post", parents=[common],
                              help="post as yourself (the tasks it reaches answer in the conversation)")
    post.add_argument("name", type=conversation_name)
    post.add_argument("text", nargs="+", metavar="TEXT", type=post_text,
                      help="the post (several words are joined with spaces)")
    post.add_argument("--id", type=post_id, help="the post's id (default: a new one); a repeated id is posted once")
    post.set_defaults(func=cmd_post)

    show = actions.add_parser("show", parents=[common], help="print the conversation: participants and posts")
    show.add_argument("name", type=conversation_name)
    show.add_argument("--json", action="store_true", help="the task API's Conversation object (with every post)")
    show.add_argument("-f", "--follow", action="store_true",
                      help="then print new posts as they come and the agents' answers as they are written "
                           "('NAME (live): ...' lines), until it is closed (or --timeout, or Ctrl-C)")
    show.add_argument("--timeout", type=seconds, metavar="S", help="with --follow: stop after S seconds")
    show.add_argument("--no-tokens", action="store_true", help="with --follow: new posts only, no live answers")
    show.set_defaults(func=cmd_show)

    for verb, text in (("pause", "keep posts, deliver nothing until resumed"),
                       ("resume", "deliver what waited (the operator runs the tasks it reaches)"),
                       ("close", "take no more posts")):
        action = actions.add_parser(verb, parents=[common], help=text)
        action.add_argument("name", type=conversation_name)
        action.set_defaults(func=cmd_status)

    delete = actions.add_parser("delete", parents=[common],
                                help="remove it with its posts (what tasks got stays in their inboxes)")
    delete.add_argument("name", type=conversation_name)
    delete.set_defaults(func=cmd_delete)

    listing = actions.add_parser("list", parents=[common], help="the conversations of the namespace")
    listing.set_defaults(func=cmd_list)


__all__ = ["add_parser", "check", "follow", "read_all", "render_conversation", "render_list", "render_post"]
