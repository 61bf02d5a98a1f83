"""``unicore conv``: shared conversations in local mode (issue 33; the rules: ``unicore.conversations``).

    unicore conv create NAME [--title T] [--task TASK]... [--handoff-limit N]
    unicore conv join NAME TASK...          unicore conv leave NAME TASK...
    unicore conv post NAME TEXT [--id ID] [--no-wait] [--timeout S]
    unicore conv show NAME [--json] [--follow [--timeout S] [--no-tokens]]
    unicore conv pause|close NAME           unicore conv resume NAME [--no-wait] [--timeout S]
    unicore conv list

The person is the local user (the account running the command: authenticated, not claimed). ``post`` delivers the
post, then runs the participating tasks' trees together until they settle (their answers, and the hand-offs between
them, go on in the conversation) and prints the posts that followed its own; ``resume`` delivers the posts that
waited and runs them the same way. ``show --follow`` prints new posts and, while they are written, the participating
agents' answers as ``<name> (live): ...`` lines (``unicore_client.local.conversation_follow``).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import uuid
from typing import Any

from unicore import conversations as rules
from unicore.api.schema import user_message_id
from unicore.errors import TaskNotFound
from unicore.launch.embedded_redis import redis_url
from unicore.store import conversations
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable

from unicore_client.arguments import UsageError, int_between, positive_seconds
from unicore_client.local.conversation_follow import ConversationFollower, post_line
from unicore_client.local.tree_runs import EXIT_FAILED, EXIT_OK, settle_roots


def person() -> str:
    """The local user: who runs this command."""
    return getpass.getuser()


def _name(text: str) -> str:
    try:
        return rules.check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _post_id(text: str) -> str:
    try:
        return user_message_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).splitlines()[0]) from None


def _existing_tasks(store: TaskStore, tasks: list[str]) -> None:
    missing = [task for task in tasks if not store.exists(task)]
    if missing:
        raise UsageError(f"no task {', '.join(missing)}: run it first (unicore run ... --name NAME)")


def _print_post(item: rules.Post) -> None:
    print(post_line(item))


def cmd_create(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    _existing_tasks(store, args.task or [])
    if not conversations.create(store, args.name, title=args.title or args.name, created_by=person(),
                                handoff_limit=args.handoff_limit):
        print(f"[unicore] conversation {args.name} exists: kept as it is", file=sys.stderr)
    conversations.join(store, args.name, "user", person())
    for task in args.task or []:
        conversations.join(store, args.name, "task", task)
    print(f"conversation {args.name}: " + ", ".join(
        m.name for m in conversations.members(store, args.name) if not m.left))
    return EXIT_OK


def cmd_join(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    _existing_tasks(store, args.tasks)
    for task in args.tasks:
        said = "joined" if conversations.join(store, args.name, "task", task) else "takes part already"
        print(f"{task} {said}")
    return EXIT_OK


def cmd_leave(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    for task in args.tasks:
        print(f"{task} {'left' if conversations.leave(store, args.name, 'task', task) else 'did not take part'}")
    return EXIT_OK


def cmd_post(args: argparse.Namespace) -> int:
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    me = person()
    conversations.join(store, args.name, "user", me)  # a person who posts takes part (idempotent)
    seq = conversations.post(store, args.name, f"user:{args.id or uuid.uuid4().hex}", kind="post",
                             sender_kind="user", sender=me, text=args.text)
    if seq == 0:
        print(f"[unicore] post {args.id} was posted before: not again", file=sys.stderr)
        return EXIT_OK
    conversations.deliver(store, args.name)
    if conversations.read_meta(store, args.name).status == "paused":
        print(f"[unicore] conversation {args.name} is paused: post #{seq} is delivered when it is resumed "
              f"(unicore conv resume {args.name})", file=sys.stderr)
    if args.no_wait:
        print(f"posted #{seq} to {args.name}")
        return EXIT_OK
    code = settle_roots(client, url, _roots(store, args.name), quiet=args.quiet, timeout=args.timeout)
    for item in conversations.posts(store, args.name, after=seq):
        _print_post(item)
    return code


def _roots(store: TaskStore, conversation: str) -> list[str]:
    roots: list[str] = []
    for task in rules.active_tasks(conversations.members(store, conversation)):
        try:
            roots.append(store.get_task(task).root or task)
        except TaskNotFound:
            continue
    return list(dict.fromkeys(roots))


def cmd_show(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    meta = conversations.read_meta(store, args.name)
    present = conversations.members(store, args.name)
    items = conversations.posts(store, args.name)
    if args.json:
        print(json.dumps({"conversation": meta.__dict__, "members": [m.__dict__ for m in present],
                          "posts": [p.__dict__ for p in items]}, indent=2))
        return EXIT_OK
    print(printable(f"conversation {meta.id}: {meta.title} [{meta.status}]", multiline=False))
    print("participants: " + printable(", ".join(
        f"{m.name}{' (agent)' if m.kind == 'task' else ''}{' (left)' if m.left else ''}" for m in present)))
    for item in items:
        _print_post(item)
    if args.follow:
        sys.stdout.flush()
        follower = ConversationFollower(store, args.name, after=items[-1].seq if items else 0,
                                        tokens=not args.no_tokens)
        try:
            follower.run(args.timeout)
        except KeyboardInterrupt:
            return EXIT_OK
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    status: rules.Status = {"pause": "paused", "resume": "open", "close": "closed"}[args.conv_command]  # type: ignore[assignment]
    changed = conversations.set_status(store, args.name, status, person())
    print(f"conversation {args.name} {'is now' if changed else 'was already'} {status}")
    if status != "open" or not changed or getattr(args, "no_wait", True):
        return EXIT_OK
    # resumed: the posts that waited are in the participants' inboxes; run them, as a post does
    after = conversations.read_meta(store, args.name).seq
    code = settle_roots(client, url, _roots(store, args.name), quiet=args.quiet, timeout=args.timeout)
    for item in conversations.posts(store, args.name, after=after):
        _print_post(item)
    return code


def cmd_delete(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    conversations.read_meta(store, args.name)  # one line when there is none
    conversations.delete(store, args.name)
    print(f"conversation {args.name} deleted")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    store = TaskStore(connect(redis_url()))
    names = conversations.list_conversations(store)
    if not names:
        print("no conversations")
    for name in names:
        meta = conversations.read_meta(store, name)
        tasks = rules.active_tasks(conversations.members(store, name))
        print(printable(f"{name}  [{meta.status}]  posts={meta.seq}  agents={','.join(tasks) or '-'}  {meta.title}",
                        multiline=False))
    return EXIT_OK


def add_conversation_command(sub: Any) -> None:
    """``unicore conv ...``."""
    conv = sub.add_parser("conv", help="shared conversations: several agents and people in one thread")
    actions = conv.add_subparsers(dest="conv_command", required=True, parser_class=type(conv))
    create = actions.add_parser("create", help="create a conversation (you take part) and add tasks to it")
    create.add_argument("name", type=_name)
    create.add_argument("--title")
    create.add_argument("--task", action="append", metavar="TASK", help="a task that takes part (repeatable)")
    create.add_argument("--handoff-limit", type=int_between(0, rules.MAX_HANDOFF_LIMIT),
                        default=rules.DEFAULT_HANDOFF_LIMIT, metavar="N",
                        help=f"agent-to-agent hand-offs per person's post (default {rules.DEFAULT_HANDOFF_LIMIT})")
    create.set_defaults(func=cmd_create)
    for verb, func, text in (("join", cmd_join, "add tasks"), ("leave", cmd_leave, "take tasks out")):
        action = actions.add_parser(verb, help=f"{text} (they get the posts made from now on)" if verb == "join"
                                    else f"{text} (they get no more posts)")
        action.add_argument("name", type=_name)
        action.add_argument("tasks", nargs="+", metavar="TASK")
        action.set_defaults(func=func)
    post = actions.add_parser("post", help="post as yourself; the tasks it reaches run, and what follows is printed")
    post.add_argument("name", type=_name)
    post.add_argument("text")
    post.add_argument("--id", type=_post_id, help="the post's id: a repeated id is posted once")
    post.add_argument("--no-wait", action="store_true", help="post only; run no turns")
    post.add_argument("--timeout", type=positive_seconds)
    post.add_argument("--quiet", "-q", action="store_true")
    post.set_defaults(func=cmd_post)
    show = actions.add_parser("show", help="print the conversation: participants and posts")
    show.add_argument("name", type=_name)
    show.add_argument("--json", action="store_true")
    show.add_argument("--follow", "-f", action="store_true",
                      help="then print new posts as they come and the agents' answers as they are written "
                           "('NAME (live): ...' lines), until it is closed")
    show.add_argument("--timeout", type=positive_seconds, help="with --follow: stop after this many seconds")
    show.add_argument("--no-tokens", action="store_true", help="with --follow: new posts only, no live answers")
    show.set_defaults(func=cmd_show)
    for verb, text in (("pause", "keep posts, deliver nothing until resumed"),
                       ("resume", "deliver what waited, then run the tasks it reaches (what follows is printed)"),
                       ("close", "take no more posts")):
        action = actions.add_parser(verb, help=text)
        action.add_argument("name", type=_name)
        action.set_defaults(func=cmd_status)
        if verb == "resume":  # (argparse: set_defaults would win over these arguments' own defaults)
            action.add_argument("--no-wait", action="store_true", help="deliver only; run no turns")
            action.add_argument("--timeout", type=positive_seconds)
            action.add_argument("--quiet", "-q", action="store_true")
    delete = actions.add_parser("delete", help="remove it with its posts (what tasks got stays in their inboxes)")
    delete.add_argument("name", type=_name)
    delete.set_defaults(func=cmd_delete)
    listing = actions.add_parser("list", help="every conversation")
    listing.set_defaults(func=cmd_list)


__all__ = ["EXIT_FAILED", "add_conversation_command", "person"]
