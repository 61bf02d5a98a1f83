"""``unicore-turn --warm``: a warm turn pod (issue 30). It loads what a turn needs, connects to Redis with its
namespace's identity, says it waits (``store.warm_pods``), and blocks until the operator assigns it one turn; then
it runs that turn exactly as ``unicore-turn TASK`` would, and exits. No assignment before its longest wait
(``UNICORE_WARM_MAX_WAIT_SECONDS``), or SIGTERM while it waits: it exits 0 without running anything (the operator
replaces it; a pod is never kept long enough to run stale credentials or images).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from pathlib import Path

from unicore.api import pod_env
from unicore.errors import ConfigError
from unicore.log import get_logger
from unicore.settings import RuntimeSettings
from unicore.store.client import RedisClient
from unicore.store.warm_pods import Assignment, register_waiting, wait_for_assignment

log = get_logger("turn.warm")

# What a turn imports lazily, imported while the pod waits (the model providers, the tools): a turn that starts in a
# warm pod does not pay for them.
PRELOADED = ("unicore.providers.openai_compat", "unicore.providers.openai_stream", "unicore.providers.scripted",
             "unicore.tools.builtin_tools", "unicore.tools.workspace", "unicore.tools.tasks",
             "unicore.launch.kubernetes")


def preload() -> None:
    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # an optional part (the Kubernetes spawner outside an agent image)
            log.debug("not preloaded: %s (%s)", module, exc)


def wait_for_turn(client: RedisClient, settings: RuntimeSettings, pod: str,
                  cancel: threading.Event) -> Assignment | None:
    """Register ``pod`` as waiting in its pool and block until it is assigned a turn (None: its wait ended)."""
    namespace, pool = settings.namespace, settings.warm_pool
    if not namespace:
        raise ConfigError("a warm turn pod needs UNICORE_NAMESPACE")
    if not pool:
        raise ConfigError("a warm turn pod needs UNICORE_WARM_POOL")
    preload()
    deadline = time.monotonic() + settings.warm_max_wait_seconds
    since = time.time()

    def register() -> None:
        register_waiting(client, namespace, pod, pool=pool, template=settings.warm_template, since=since)

    register()
    log.info("warm pod %s waits in pool %s", pod, settings.warm_pool)
    found = wait_for_assignment(client, namespace, pod, deadline=deadline, cancel=cancel, renew=register)
    if found is not None:
        log.info("warm pod %s runs %s (turn Job %s)", pod, found.task_id, found.job)
    return found


def tree_workspace(settings: RuntimeSettings, assignment: Assignment) -> Path | None:
    """The turn's workspace: the tree's folder of the claim when the pod mounts the claim whole (the assignment names
    it; made when it is the tree's first turn), else the pod's own (``UNICORE_WORKSPACE``)."""
    if not assignment.workspace or settings.workspace is None:
        return settings.workspace
    if "/" in assignment.workspace or assignment.workspace in ("", ".", ".."):
        raise ConfigError(f"not a workspace folder: {assignment.workspace!r}")
    folder = settings.workspace / assignment.workspace
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make the tree's workspace folder {folder}: {exc.strerror or exc}") from None
    os.environ[pod_env.WORKSPACE] = str(folder)
    return folder


__all__ = ["PRELOADED", "preload", "tree_workspace", "wait_for_turn"]
