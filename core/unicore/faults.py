"""Named fault points: the fault-injection harness kills a turn process at a chosen step (tests, chaos runs).

A turn calls ``fault_point("after drain")`` etc. at every named step (``STEPS``). Nothing happens unless
``UNICORE_FAULTS`` is set in the turn's environment:

- ``kill:<step>``: SIGKILL this process the first time it reaches ``<step>``;
- ``kill-once[:<percent>:<seed>]``: SIGKILL at every named step once per (task, turn, step) over the whole run,
  coordinated through Redis (``SET uc:faults:<task>#<turn>:<step> NX``, ``$REDIS_URL``); every kill is logged in
  the list ``uc:faults:log``. With ``<percent>`` only that share of the (task, turn, step) points is armed, chosen
  by a hash with ``<seed>`` (deterministic), so later steps of a turn are reached too. A tree run under
  ``kill-once`` therefore crashes every task at every (armed) step it reaches, once, and must still deliver every
  message and report exactly once (tests/integration/test_fault_injection.py).
- ``kill-once@<task id>:<step>``: SIGKILL task ``<task id>``'s turn the first time it reaches ``<step>``, once per
  turn over the whole run (claimed through Redis as ``kill-once``): one chosen crash, whose retry then runs through.

The process dies with SIGKILL: no ``finally``, no lease release, exactly like an OOM kill or a node loss. A turn
container's process is pid 1 of its PID namespace (the Job runs ``unicore-turn`` itself, no init), and the kernel
drops a SIGKILL that pid 1 sends itself (a namespace's init gets from inside it only the signals it handles): that
process ends with ``os._exit(137)`` instead, still with no ``finally``, no atexit, no flush, and the exit status of a
SIGKILLed container (128 + 9) that the kubelet reports (tests/cluster/test_fault_injection_pods.py).
"""

from __future__ import annotations

import hashlib
import os
import signal

from unicore.api import pod_env
from unicore.store.faults import claim_kill
from unicore.store.keys import FAULTS_LOG

ENV = "UNICORE_FAULTS"
LOG_KEY = FAULTS_LOG
# Steps every tree run reaches (the kill-once harness must hit them all). Points only some turns reach are in
# APPROVAL_STEPS (``kill:<point>`` works for those too).
STEPS = (
    "after lease",
    "after drain",
    "after model call",
    "after answer",
    "after tool result",
    "after end turn",
    "after notify",
    "after release",
)

_scope = ""
_client = None


def set_scope(scope: str) -> None:
    """What ``kill-once`` keys a kill by (the turn sets ``<task id>#<turn number>``)."""
    global _scope
    _scope = scope


def _redis():  # type: ignore[no-untyped-def]
    global _client
    if _client is None:
        from unicore.store.client import build_client

        _client = build_client(os.environ[pod_env.REDIS_URL])
    return _client


def _die() -> None:
    """SIGKILL this process; as the pid 1 of a PID namespace (which ignores that), ``_exit`` with 128 + SIGKILL."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)


def fault_point(step: str) -> None:
    """Die here if the harness asks for it (see the module docstring); otherwise return at once."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    if spec == f"kill:{step}":
        _die()
    if spec.startswith("kill-once@") and _scope:
        task, _, at = spec[len("kill-once@"):].rpartition(":")
        if at == step and _scope.rpartition("#")[0] == task and claim_kill(_redis(), f"{_scope}:{step}"):
            _die()
        return
    if spec.startswith("kill-once") and _scope:
        point = f"{_scope}:{step}"
        _, percent, seed = (spec.split(":") + ["100", ""])[:3]
        digest = hashlib.sha256(f"{seed}|{point}".encode()).digest()
        if digest[0] * 100 >= int(percent) * 256:
            return
        if claim_kill(_redis(), point):
            _die()


# A turn whose answer calls a gated tool or ask_user, right after it recorded the calls (``approvals_turn``).
APPROVAL_STEPS = ("after pending calls",)
# Whoever posts a task's answer or outbox to its conversations (its turn, the local supervisor, the operator), right
# after posting and before delivering (``store.conversations.publish``).
CONVERSATION_STEPS = ("after conversation post",)

# The operator's (``kill:<point>`` in its own environment): right after a warm pod was assigned a turn, before its Job
# and pod got the task's labels (``unicore_operator.warm_pools``); right after a schedule created a run's AgentTask,
# before its status recorded the run (``unicore_operator.schedules``).
OPERATOR_STEPS = ("after warm assign", "after scheduled task created")

__all__ = ["APPROVAL_STEPS", "CONVERSATION_STEPS", "ENV", "LOG_KEY", "OPERATOR_STEPS", "STEPS", "fault_point",
           "set_scope"]
