"""``unicore suspend|resume|stop``: local mode's pause button (``unicore.store.suspension``).

``unicore suspend TASK``                     stop TASK's running turn (its tool calls recorded as cancelled) and start
                                            no new one; messages sent meanwhile wait in its inbox
``unicore resume TASK [--no-wait]``          let TASK run again, then run its tree until it settles (``--no-wait``:
                                            return at once; ``unicore ui`` or the next ``run``/``send`` runs it)
``unicore stop TASK``                        suspend TASK and every descendant: the tree's work ends

A running turn is stopped by the local supervisor that started it (``unicore run``/``send``/``ui``), within a
second. On Kubernetes the AgentTask's ``spec.suspend`` is the switch: ``kubectl agenttask suspend|resume``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from unicore.launch.embedded_redis import redis_url
from unicore.store import suspension
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable

from unicore_client.arguments import UsageError, positive_seconds
from unicore_client.local.tree_runs import EXIT_OK, open_store, settle


def _local_id(task_id: str) -> str:
    if "/" in task_id:
        raise UsageError(f"{task_id}: a task of a cluster (namespace/name) is suspended with "
                         "'kubectl agenttask suspend|resume' (its spec.suspend)")
    return task_id


def print_suspended(store: TaskStore, task_id: str) -> bool:
    """When ``task_id`` is suspended (its tree settled because of it), say so and how to resume (stderr)."""
    if not suspension.is_suspended(store, task_id):
        return False
    print(printable(f"[unicore] {task_id} is suspended (resume: unicore resume {shlex.quote(task_id)})"),
          file=sys.stderr)
    return True


def cmd_suspend(args: argparse.Namespace) -> int:
    task_id = _local_id(args.task)
    changed = suspension.suspend(open_store(), task_id)
    print(printable(f"{task_id} suspended" if changed else f"{task_id} was already suspended"))
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    task_id = _local_id(args.task)
    changed = suspension.stop(open_store(), task_id)
    print(printable(f"stopped {task_id}: suspended " + (", ".join(changed) if changed else "nothing new")))
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    task_id = _local_id(args.task)
    url = redis_url()
    client = connect(url)
    store = TaskStore(client)
    changed = suspension.resume(store, task_id)
    print(printable(f"{task_id} resumed" if changed else f"{task_id} was not suspended"))
    if args.no_wait:
        return EXIT_OK
    return settle(client, url, task_id, quiet=args.quiet, timeout=args.timeout)


def add_control_commands(sub: Any) -> None:
    suspend = sub.add_parser("suspend", help="stop a task's running turn and start no new one")
    suspend.add_argument("task")
    suspend.set_defaults(func=cmd_suspend)

    stop = sub.add_parser("stop", help="suspend a task and every descendant")
    stop.add_argument("task")
    stop.set_defaults(func=cmd_stop)

    resume = sub.add_parser("resume", help="let a suspended task run again, then run its tree until it settles")
    resume.add_argument("task")
    resume.add_argument("--no-wait", action="store_true", help="clear the flag only; do not run turns")
    resume.add_argument("--timeout", type=positive_seconds, help="give up waiting after this many seconds")
    resume.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    resume.set_defaults(func=cmd_resume)


__all__ = ["add_control_commands", "print_suspended"]
