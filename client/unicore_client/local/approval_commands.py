"""``unicore approve|deny|pending`` and what ``run``/``send``/``show`` print about tool calls waiting for a person.

``unicore approve TASK [--call ID] [--reason TEXT]``   approve one waiting call (default: every waiting approval of
                                                      TASK), then run the tree until it settles (``--no-wait``: not)
``unicore deny TASK [--call ID] [--reason TEXT]``      deny: the model gets an error result with the reason
``unicore pending TASK``                               the calls of TASK and its descendants that wait for a person

A question (``ask_user``) is answered with ``unicore send TASK ANSWER``. Approvals not decided within the task's
``timeout_seconds`` are denied by the local supervisor the next time it runs the tree (``run``, ``send``,
``approve``, ``deny``); from their timeout on, ``pending`` no longer lists them and approving or denying one is
refused (exit 1: the timeout denies it, ``state.approvals.decide``).
"""

from __future__ import annotations

import argparse
import getpass
import shlex
import sys
from typing import Any

from unicore.errors import UniCoreError
from unicore.launch.embedded_redis import redis_url
from unicore.store.approvals import PendingCall
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable

from unicore_client.arguments import positive_seconds
from unicore_client.local.tree_runs import EXIT_FAILED, EXIT_OK, open_store, settle


def decider() -> str:
    """Who decides in local mode: the local user's name."""
    try:
        return getpass.getuser() or "user"
    except (KeyError, OSError):
        return "user"


def call_mark(call: PendingCall) -> str:
    """What ``show`` prints under a call that waited (or waits) for a person (not yet escaped)."""
    if call.status == "pending":
        return "[waiting for an answer]" if call.kind == "input" else "[waiting for approval]"
    who = call.decided_by or "?"
    if call.status == "answered":
        return f"[answered by {who}]"
    return f"[{call.status} by {who}" + (f": {call.reason}]" if call.reason else "]")


def waiting_lines(store: TaskStore, root: str) -> list[str]:
    """What the tree under ``root`` waits for and how to answer, one line each (not yet escaped); [] when nothing."""
    lines: list[str] = []
    for _depth, record in store.tree(root):
        for call in store.pending_calls(record.id):
            task = shlex.quote(record.id)
            if call.kind == "input":
                lines.append(f"{record.id} asks ({call.call_id}): {call.question}")
                lines.append(f"  answer: unicore send {task} 'ANSWER'")
            else:
                lines.append(f"{record.id} waits for approval: {call.describe()}")
                lines.append(f"  approve: unicore approve {task} --call {call.call_id}   "
                             f"deny: unicore deny {task} --call {call.call_id} --reason 'WHY'")
    return lines


def print_waiting(store: TaskStore, root: str) -> bool:
    """Print what the tree waits for (stdout); False when it waits for nothing."""
    lines = waiting_lines(store, root)
    for line in lines:
        print(printable(line))
    return bool(lines)


def cmd_decide(args: argparse.Namespace) -> int:
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    approve = args.command == "approve"
    try:
        decided = store.decide(args.task, args.call, approve, by=decider(), reason=args.reason or "")
    except UniCoreError as exc:
        print(f"unicore: error: {printable(str(exc), multiline=False)}", file=sys.stderr)
        return EXIT_FAILED
    if not decided:
        print(printable(f"unicore: error: {args.task} has no tool call waiting for approval", multiline=False),
              file=sys.stderr)
        return EXIT_FAILED
    for call in decided:
        print(printable(f"{call.status}: {call.describe()}", multiline=False), file=sys.stderr)
    if args.no_wait:
        return EXIT_OK
    code = settle(client, url, args.task, quiet=args.quiet, timeout=args.timeout)
    if code == EXIT_OK and not print_waiting(store, store.get_task(args.task).root):
        answer = store.get_task(args.task).last_response
        if answer:
            print(printable(answer))
    return code


def cmd_pending(args: argparse.Namespace) -> int:
    store = open_store()
    store.get_task(args.task)
    if not print_waiting(store, args.task):
        print(printable(f"nothing of {args.task} waits for a person"))
    return EXIT_OK


def add_approval_commands(sub: Any) -> None:
    """Register ``approve``, ``deny`` and ``pending`` on the ``unicore`` parser's subcommands."""
    for name, verb in (("approve", "approve"), ("deny", "deny")):
        cmd = sub.add_parser(name, help=f"{verb} tool calls waiting for approval, then run the tree again")
        cmd.add_argument("task")
        cmd.add_argument("--call", help="the call id (unicore pending TASK); default: every waiting approval")
        cmd.add_argument("--reason", help="why (the model sees it with a denial)")
        cmd.add_argument("--no-wait", action="store_true", help="decide only; do not run turns")
        cmd.add_argument("--timeout", type=positive_seconds)
        cmd.add_argument("--quiet", "-q", action="store_true")
        cmd.set_defaults(func=cmd_decide)
    pending = sub.add_parser("pending", help="list the tool calls of a task tree waiting for a person")
    pending.add_argument("task")
    pending.set_defaults(func=cmd_pending)


__all__ = ["add_approval_commands", "call_mark", "decider", "print_waiting", "waiting_lines"]
