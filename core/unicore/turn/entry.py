"""``unicore-turn TASK``: the turn process (a Job's container, or a local-mode child process). ``unicore-turn --warm``:
a warm turn pod, which waits for the operator to assign it its one turn (``unicore.turn.warm``).

Kept apart from the ``unicore`` CLI (``unicore_client.local.main``): a turn pays its start-up on every turn, so it
imports only what a turn needs (not the CLI's script-file and argument checks). Exit codes: ``unicore.turn.outcome``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

import redis

from unicore import log as unicore_log
from unicore.api import pod_env
from unicore.errors import ConfigError
from unicore.launch.embedded_redis import redis_url
from unicore.settings import RuntimeSettings
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable
from unicore.traces import setup as traces
from unicore.turn.context_window import ContextSettings
from unicore.turn.outcome import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from unicore.turn.run import run_turn
from unicore.turn.signals import install_cancel_handlers

PROG = "unicore-turn"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line (no usage block), exit code 2."""
        print(f"{PROG}: error: {printable(message, multiline=False)} (see '{PROG} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _fail(message: str) -> int:
    print(f"{PROG}: error: {printable(message, multiline=False)}", file=sys.stderr)
    return EXIT_FAILED


def spawner_from_settings(client: redis.Redis, settings: RuntimeSettings) -> Any:
    """The spawner ``$UNICORE_SPAWNER`` names (RuntimeSettings only allows local or kubernetes)."""
    if settings.spawner == "local":
        return None  # run_turn's default: the local spawner
    if settings.spawner == "kubernetes":
        try:
            from unicore.launch.kubernetes import KubernetesSpawner  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ConfigError(f"{pod_env.SPAWNER}=kubernetes but the Kubernetes spawner is unavailable: "
                              f"{exc}") from None
        return KubernetesSpawner.from_env(TaskStore(client), settings)
    raise ConfigError(f"{pod_env.SPAWNER} must be local or kubernetes, not {settings.spawner!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run exactly one turn of TASK and exit with its code (see ``unicore.turn.outcome``)."""
    try:
        settings = RuntimeSettings.from_env()  # the one read of the turn process's variables
        context = ContextSettings.from_env()  # the model's context window (unicore.turn.context_window)
    except ConfigError as exc:
        return _fail(str(exc))
    parser = _Parser(prog=PROG, description="Run one agent turn of a task, then exit.")
    parser.add_argument("task", nargs="?", help=f"task id (default: ${pod_env.TASK_ID})")
    parser.add_argument("--warm", action="store_true",
                        help=f"wait in warm pool ${pod_env.WARM_POOL} until the operator assigns a turn, run it, exit")
    args = parser.parse_args(argv)
    if args.warm and args.task:
        parser.error("--warm takes no task id: the operator assigns one")
    if not args.warm and not (args.task or settings.task_id):
        parser.error(f"a task id is required (argument or ${pod_env.TASK_ID})")
    unicore_log.configure(settings.log_level)
    cancel = threading.Event()
    install_cancel_handlers(cancel)
    task: str = args.task or settings.task_id or ""
    traces.start("unicore-turn")  # only when OTEL_* configure an exporter (unicore.traces.setup)
    try:
        code, last_line = _run(args, settings, context, cancel, task)
    finally:
        traces.stop()  # its spans leave before the process does (bounded), and before its last line
    if last_line:
        # one line, the process's last: on a cluster it is the container's termination message (the Job's
        # terminationMessagePolicy), which the AgentTask's status and TurnFailed Event show
        print(last_line, file=sys.stderr)
    return code


def _run(args: argparse.Namespace, settings: RuntimeSettings, context: ContextSettings, cancel: threading.Event,
         task: str) -> tuple[int, str]:
    """The turn's exit code and the line to end with ("": none)."""
    try:
        client = connect(redis_url(settings))
        spawner = spawner_from_settings(client, settings) if args.warm else None  # a warm pod: before it waits
        if args.warm:
            from unicore.turn.warm import tree_workspace, wait_for_turn

            assignment = wait_for_turn(client, settings, os.environ.get(pod_env.POD_NAME) or socket.gethostname(),
                                       cancel)
            if assignment is None:
                return EXIT_OK, ""  # its wait ended unused (or SIGTERM): nothing ran
            task = assignment.task_id
            os.environ[pod_env.TASK_ID] = task
            settings = settings.model_copy(update={"task_id": task, "workspace": tree_workspace(settings,
                                                                                               assignment)})
        if not args.warm:
            spawner = spawner_from_settings(client, settings)
        outcome = run_turn(task, redis=client, spawner=spawner, cancel=cancel, settings=settings,
                           context=context)
        if outcome.error:
            return outcome.exit_code, f"{PROG}: {task}: {printable(outcome.error, multiline=False)}"
        return outcome.exit_code, ""
    except (ConfigError, redis.RedisError) as exc:
        return EXIT_FAILED, f"{PROG}: error: {printable(str(exc), multiline=False)}"


if __name__ == "__main__":
    raise SystemExit(main())
