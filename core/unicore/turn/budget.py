"""A turn's side of its tree's token budget (``state.tree_budget``): before each model call ``admit`` reserves the
call's worst case, waiting while the calls in flight elsewhere in the tree may use the rest; after the call's usage
is stored ``release`` gives the reservation back. A tree without a budget costs one read per turn.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import redis

from unicore.errors import ModelError
from unicore.log import get_logger
from unicore.providers.base import ModelRequest
from unicore.providers.calling import estimate_tokens
from unicore.store import tree_budget

log = get_logger("turn_budget")

FIRST_WAIT_SECONDS = 0.02
MAX_WAIT_SECONDS = 0.5


class BudgetUsedUp(ModelError):
    """The tree's token budget is used up: the call was not made (the turn stops with this note)."""


class TreeBudget:
    """One turn's reservations on its tree's budget (one at a time: a turn's calls run one after another)."""

    def __init__(self, client: redis.Redis, task_id: str, root_id: str, *, hold_seconds: float,
                 cancel: threading.Event, check_cancel: Callable[[], None], mark: Callable[[str], None]) -> None:
        self.redis = client
        self.task_id = task_id
        self.root_id = root_id
        self.hold_id = f"{task_id}#{uuid.uuid4().hex}"
        self.ttl_ms = max(1, int(hold_seconds * 1000))
        self.cancel = cancel
        self.check_cancel = check_cancel
        self.mark = mark
        self.budget: int | None = None  # read at the first call
        self.holding = False

    def admit(self, request: ModelRequest) -> None:
        """Reserve the call's worst case; wait while the tree's other calls in flight hold the rest; BudgetUsedUp
        when the tree has used its budget."""
        if self.budget is None:
            self.budget = tree_budget.tree_budget(self.redis, self.root_id)
        if self.budget <= 0:
            return
        tokens = estimate_tokens(request)
        wait, told = FIRST_WAIT_SECONDS, False
        while True:
            self.check_cancel()
            got = tree_budget.reserve(self.redis, self.root_id, self.hold_id, tokens, self.budget, self.ttl_ms)
            if got.outcome == tree_budget.ADMITTED:
                self.holding = True
                return
            if got.outcome == tree_budget.USED_UP:
                raise BudgetUsedUp(
                    f"stopped: the token budget of the tree ({self.budget} tokens) is used up ({got.used} used)")
            if not told:
                log.info("task %s: waiting for the tree's token budget: %d used and %d reserved by calls in flight, "
                         "of %d", self.task_id, got.used, got.held, self.budget)
                told = True
            self.mark("waiting for the token budget")  # waiting is progress: the calls in flight end or expire
            self.cancel.wait(wait)
            wait = min(wait * 2, MAX_WAIT_SECONDS)

    def release(self) -> None:
        """Give the reservation back (the call's usage is counted by now)."""
        if self.holding:
            tree_budget.release(self.redis, self.root_id, self.hold_id)
            self.holding = False

    def release_quietly(self) -> None:
        """``release`` at the turn's end, whatever happened (a reservation left behind expires anyway)."""
        try:
            self.release()
        except redis.RedisError as exc:
            log.warning("task %s: could not give the token budget reservation back (it expires): %s",
                        self.task_id, exc)


def hold_seconds(stall_seconds: float, lease_ttl_ms: int) -> float:
    """How long a reservation outlives its turn's death: no live call runs longer than the stall limit, and the lease
    of a turn that stopped beating expires within its TTL."""
    return stall_seconds + lease_ttl_ms / 1000


__all__ = ["BudgetUsedUp", "TreeBudget", "hold_seconds"]
