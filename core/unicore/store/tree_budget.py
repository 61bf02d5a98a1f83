"""A task tree's token budget (its root's ``limits.token_budget``) shared by the tree's concurrent turns: each model
call holds a reservation while it runs, so concurrent calls cannot together spend past the budget.

The tree's used tokens are ``tree_total_tokens`` on the root's record (the store rolls each call's usage up there
after storing it). Alone, a check of that count before each call lets every turn running at that moment pass it at
once (five children checking 2,999 of 3,000 make five calls). So before a call a turn reserves the call's worst case
(``providers.calling.estimate_tokens``: its input estimate plus ``max_tokens``) in ``uc:{root}:budget`` (hash:
hold id -> ``"<tokens> <expires at, ms>"``, under the root's hash tag, so one script reads the used count and every
reservation and writes its own):

- used >= budget: refused, the budget is used up (``USED_UP``);
- used + the other live reservations >= budget: not now (``HELD``): the calls in flight may use the rest; the turn
  waits until they give their reservations back (``unicore.turn.budget``);
- else the reservation is written (``ADMITTED``); a turn's later reservation replaces its earlier one.

The turn gives it back (``release``) once the call's usage is counted. A reservation whose turn died expires after
``ttl_ms`` (the turn's stall limit plus its lease TTL: no live call runs longer); until then it still counts.

The bound (docs/architecture.md, "The token budget is reserved per model call"): a call starts only while the used
count plus the reservations of the calls in flight is under the budget, and each reservation covers its call's usage
as long as the call uses no more than its estimate. So the tree ends at most one call's usage past the budget: used +
reserved < budget when the last call started, and everything after it is refused. A call that uses more than its
reservation (an input estimate off, a provider that ignores ``max_tokens``) can pass it by that excess as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicore.api.schema import Limits
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys

ADMITTED, HELD, USED_UP = 1, -1, 0

# KEYS: root record, reservations   ARGV: hold id, tokens, budget, ttl ms. Returns {outcome, used, held by others}.
RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local used = tonumber(redis.call('HGET', KEYS[1], 'tree_total_tokens') or '0') or 0
local budget = tonumber(ARGV[3])
if used >= budget then return {0, used, 0} end
local held = 0
local last = now + tonumber(ARGV[4])  -- when the last reservation expires: the key's expiry
local holds = redis.call('HGETALL', KEYS[2])
for i = 1, #holds, 2 do
  local tokens, expires = string.match(holds[i + 1], '^(%d+) (%d+)$')
  if not tokens or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[2], holds[i])
  elseif holds[i] ~= ARGV[1] then
    held = held + tonumber(tokens)
    last = math.max(last, tonumber(expires))
  end
end
if used + held >= budget then return {-1, used, held} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[2], last - now)
return {1, used, held}
"""


@dataclass(frozen=True)
class Reservation:
    outcome: int  # ADMITTED, HELD or USED_UP
    used: int  # the tree's used tokens when asked
    held: int  # tokens reserved by the other calls in flight


def tree_budget(client: RedisClient, root_id: str) -> int:
    """The tree's token budget (0: none) from its root's record."""
    raw = client.hget(TaskKeys(root_id).task, "limits")
    return Limits.model_validate_json(raw).token_budget if raw else 0


def reserve(client: RedisClient, root_id: str, hold_id: str, tokens: int, budget: int, ttl_ms: int) -> Reservation:
    """Reserve ``tokens`` of the tree's ``budget`` for one call (see the module doc); one script."""
    keys = TaskKeys(root_id)
    outcome, used, held = client.register_script(RESERVE)(
        keys=[keys.task, keys.budget], args=[hold_id, max(0, int(tokens)), int(budget), max(1, int(ttl_ms))])
    return Reservation(int(outcome), int(used), int(held))


def release(client: RedisClient, root_id: str, hold_id: str) -> None:
    """Give a call's reservation back (its usage is counted now)."""
    client.hdel(TaskKeys(root_id).budget, hold_id)


def reserved(client: RedisClient, root_id: str) -> dict[str, int]:
    """hold id -> tokens of the reservations stored now, expired ones included (for tests and diagnostics)."""
    return {hold: int(value.split(" ", 1)[0]) for hold, value in client.hgetall(TaskKeys(root_id).budget).items()}


__all__ = ["ADMITTED", "HELD", "USED_UP", "Reservation", "release", "reserve", "reserved", "tree_budget"]
