"""The Lua scripts behind every multi-step write. Each runs atomically on one task's keys (one hash tag).

Fenced scripts take ``KEYS[1]`` = the lease hash and ``ARGV[1]`` = the caller's fence (``Lease.fence``:
``<token>/<last write>``, or the bare token) and write nothing unless the lease still holds that token (error reply
``UC_LEASE_LOST``).

Lost writes (a Redis failover: docs/architecture.md, "Redis failover"). The lease hash also holds ``last_write``, the
write id of its holder's newest write of the conversation (``drain``, ``append_message``: ``_CHAIN``), and the fence
carries the one the holder last got a reply for. When they differ, a write the server acknowledged is missing (the
primary that took it died before its replica got it, and the replica was promoted): the script deletes the lease and
refuses (``UC_LEASE_LOST UC_WRITES_LOST``) instead of writing on top of the gap, so the turn stops as if it had
crashed at the instant of the loss and the next turn runs it again from what survived. The lease's renewal and
release carry the bare token (the heartbeat thread does not know the main thread's newest write).

Messages and turn headers are built by string concatenation around JSON produced in Python, so content blocks
are stored byte for byte as Python serialized them (cjson would turn ``[]`` into ``{}``).
"""

from __future__ import annotations

LEASE_LOST = "UC_LEASE_LOST"
STALE_INBOX = "UC_STALE_INBOX"
NO_TURN = "UC_NO_TURN"

WRITES_LOST = "UC_WRITES_LOST"

# The token check alone (``fence_chain``: the caller's newest write, nil when the fence is a bare token).
_TOKEN_FENCE = """
local fence_token, fence_chain = string.match(ARGV[1], '^([^/]*)/(.*)$')
if fence_token == nil then fence_token = ARGV[1] end
if redis.call('HGET', KEYS[1], 'token') ~= fence_token then
  return redis.error_reply('UC_LEASE_LOST')
end
"""

# The lost-writes check (module doc): after ``_TOKEN_FENCE`` (and, in a script that replays, after the replay).
_CHAIN = """
if fence_chain ~= nil and (redis.call('HGET', KEYS[1], 'last_write') or '') ~= fence_chain then
  redis.call('DEL', KEYS[1])
  return redis.error_reply('UC_LEASE_LOST UC_WRITES_LOST: a write this lease holder was acknowledged is missing')
end
"""

_FENCE = _TOKEN_FENCE + _CHAIN

_MESSAGE_JSON = """
local function message_json(seq, turn_number, first_seq, role, now, content, inbox_ids)
  local tail = '}'
  if inbox_ids ~= nil and inbox_ids ~= '[]' then tail = ',"inbox_ids":' .. inbox_ids .. '}' end
  return '{"seq":' .. seq .. ',"turn_number":' .. turn_number .. ',"message_number":' .. (seq - first_seq)
    .. ',"role":"' .. role .. '","timestamp":' .. now .. ',"content":' .. content .. tail
end
"""

# Idempotent retries: a fenced write that carries a write id (unique per call, the same on the Redis client's
# retries) remembers it with its result on the task hash; a retry of a call the server already executed (its reply
# was lost with the connection) returns that result instead of writing again. W = the ARGV index of the write id.
def _replay(w: int) -> str:
    return f"""
if ARGV[{w}] ~= '' and redis.call('HGET', KEYS[2], 'last_write_id') == ARGV[{w}] then
  return cjson.decode(redis.call('HGET', KEYS[2], 'last_write_result'))
end
"""


def _remember(w: int, result: str) -> str:
    return f"""
local result = {result}
if ARGV[{w}] ~= '' then
  redis.call('HSET', KEYS[2], 'last_write_id', ARGV[{w}], 'last_write_result', cjson.encode(result))
end
return result
"""


# KEYS: task   ARGV: '1' (suspend) | '0' (resume), now. -1: no such task; 0: already so; 1: changed.
SET_SUSPENDED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local now_on = redis.call('HGET', KEYS[1], 'suspended') == '1'
if now_on == (ARGV[1] == '1') then return 0 end
redis.call('HSET', KEYS[1], 'suspended', ARGV[1], 'suspended_at', ARGV[2], 'updated_at', ARGV[2])
return 1
"""

# KEYS: task, inbox, seen   ARGV: created_at, prompt_id ('' = none), prompt_entry, field, value, ...
CREATE_TASK = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2])
  redis.call('RPUSH', KEYS[2], ARGV[3])
end
return 1
"""

# KEYS: task, inbox, seen   ARGV: id, entry_json, now
QUEUE_MESSAGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""

# KEYS: lease, task, inbox, seen   ARGV: token, id, entry_json, now
# A turn queues the results of its own tool calls fenced: a turn whose lease is gone (a zombie whose tool outlived
# the lease) writes nothing; its successor already answered those calls with synthetic error results.
QUEUE_OWN_RESULT = (
    _FENCE
    + """
if redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[2]) == 0 then return 0 end
redis.call('RPUSH', KEYS[3], ARGV[3])
return 1
"""
)

# KEYS: lease, fence, task, heartbeat   ARGV: holder, ttl_ms, now
ACQUIRE_LEASE = """
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1, ''} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'holder') or ''}
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'token', token, 'holder', ARGV[1], 'acquired_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[4], ARGV[3])
redis.call('HSET', KEYS[3], 'status', 'running', 'lease_holder', ARGV[1], 'updated_at', ARGV[3])
return {token, ARGV[1]}
"""

# KEYS: lease, heartbeat   ARGV: token, ttl_ms, now
RENEW_LEASE = (
    _FENCE
    + """
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return 1
"""
)

# Marking a task idle when no turn holds it any more (a released, broken or reaped lease): one definition.
# KEYS[2] = the task hash; ``now`` and ``extra`` (more field/value pairs) are Lua expressions.
def mark_idle(now: str, extra: str = "") -> str:
    more = f", {extra}" if extra else ""
    return f"redis.call('HSET', KEYS[2], 'status', 'idle', 'lease_holder', '', 'updated_at', {now}{more})\n"


# KEYS: lease, task   ARGV: token, now
# released_at: when the last turn let go (the watchdog gives its pod that long + the heartbeat timeout to exit)
RELEASE_LEASE = (
    """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
"""
    + mark_idle("ARGV[2]", "'released_at', ARGV[2]")
    + "return 1\n"
)

# KEYS: lease, task, inbox, turns, messages
# ARGV: token, n_entries, last_entry_raw, first_drain ('1'|'0'), now, write id,
#       then per message: content_json, inbox_ids_json
# (the ids of the `user` inbox entries the message holds, stored as its "inbox_ids" unless the list is empty)
# Seed 000 process_task_queue: a new turn iff there is no turn, or the current turn has no messages, or the task
# was stopped (first drain of the process) and the last message is turn-ending (text-only assistant).
DRAIN = (
    _TOKEN_FENCE
    + _MESSAGE_JSON
    + _replay(6)
    + _CHAIN
    + """
local n = tonumber(ARGV[2])
if redis.call('LINDEX', KEYS[3], n - 1) ~= ARGV[3] then return redis.error_reply('UC_STALE_INBOX') end
local now = ARGV[5]
local nturns = redis.call('LLEN', KEYS[4])
local nmsgs = redis.call('LLEN', KEYS[5])
local new_turn = false
local turn_number = 0
local first_seq = 0
if nturns == 0 then
  new_turn = true
else
  local header = cjson.decode(redis.call('LINDEX', KEYS[4], -1))
  turn_number = header['turn_number']
  first_seq = header['first_seq']
  if nmsgs <= first_seq then
    new_turn = true
  elseif ARGV[4] == '1' then
    local last_raw = redis.call('LINDEX', KEYS[5], -1)
    local ok, last = pcall(cjson.decode, last_raw)
    if not ok then  -- stored before text was made valid (state.codec): loaded as a text stand-in (state.messages)
      last = {role = string.match(last_raw, '"role":"(%a+)"'), content = {{text = ''}}}
    end
    if last['role'] == 'assistant' then
      local has_text, has_tool_use = false, false
      for _, block in ipairs(last['content']) do
        if type(block) == 'table' then
          if block['text'] ~= nil then has_text = true end
          if block['toolUse'] ~= nil then has_tool_use = true end
        end
      end
      if has_text and not has_tool_use then new_turn = true end
    end
  end
end
if new_turn and #ARGV < 7 then new_turn = false end  -- only wake-ups drained (no message): no empty turn
if new_turn then
  turn_number = nturns
  first_seq = nmsgs
  redis.call('RPUSH', KEYS[4],
    '{"turn_number":' .. turn_number .. ',"started_at":' .. now .. ',"first_seq":' .. first_seq .. '}')
  redis.call('HSET', KEYS[2], 'turns', nturns + 1)
end
local seq = nmsgs
for i = 7, #ARGV, 2 do
  redis.call('RPUSH', KEYS[5], message_json(seq, turn_number, first_seq, 'user', now, ARGV[i], ARGV[i + 1]))
  seq = seq + 1
end
redis.call('LTRIM', KEYS[3], n, -1)
redis.call('HSET', KEYS[2], 'updated_at', now)
redis.call('HSET', KEYS[1], 'last_write', ARGV[6])
"""
    + _remember(6, "{turn_number, new_turn and 1 or 0, nmsgs, first_seq}")
    + """
"""
)

# KEYS: lease, task, turns, messages
# ARGV: token, role, content_json, now, is_assistant, has_tool_use, input_tokens, output_tokens, total_tokens,
#       write id
APPEND_MESSAGE = (
    _TOKEN_FENCE
    + _MESSAGE_JSON
    + _replay(10)
    + _CHAIN
    + """
local header_raw = redis.call('LINDEX', KEYS[3], -1)
if not header_raw then return redis.error_reply('UC_NO_TURN') end
local header = cjson.decode(header_raw)
local seq = redis.call('LLEN', KEYS[4])
redis.call('RPUSH', KEYS[4], message_json(seq, header['turn_number'], header['first_seq'], ARGV[2],
  ARGV[4], ARGV[3]))
if ARGV[5] == '1' then redis.call('HINCRBY', KEYS[2], 'iterations', 1) end
if ARGV[6] == '1' then redis.call('HINCRBY', KEYS[2], 'tool_iterations', 1) end
if tonumber(ARGV[9]) > 0 then
  redis.call('HINCRBY', KEYS[2], 'input_tokens', ARGV[7])
  redis.call('HINCRBY', KEYS[2], 'output_tokens', ARGV[8])
  redis.call('HINCRBY', KEYS[2], 'total_tokens', ARGV[9])
end
redis.call('HSET', KEYS[2], 'updated_at', ARGV[4])
redis.call('HSET', KEYS[1], 'last_write', ARGV[10])
"""
    + _remember(10, "{seq, header['turn_number'], seq - header['first_seq']}")
    + """
"""
)

# KEYS: lease, task   ARGV: token, now, input_tokens, output_tokens, total_tokens
RECORD_USAGE = (
    _FENCE
    + """
redis.call('HINCRBY', KEYS[2], 'input_tokens', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'output_tokens', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'total_tokens', ARGV[5])
redis.call('HSET', KEYS[2], 'updated_at', ARGV[2])
return 1
"""
)

# KEYS: lease, task, turnmeta
# ARGV: token, now, turn_number, last_response, report_id, report, meta field, meta value, ...
# The report for the parent (report_id '' = none) is stored with the turn's end, atomically: whoever finds it
# later (the next turn, the operator, the local supervisor) can deliver it (TaskStore.deliver_report).
END_TURN = (
    _FENCE
    + """
local prefix = ARGV[3] .. ':'
for i = 7, #ARGV, 2 do
  redis.call('HSET', KEYS[3], prefix .. ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[2], 'last_response', ARGV[4], 'last_error', '', 'updated_at', ARGV[2])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[2], 'report_id', ARGV[5], 'report', ARGV[6])
end
return 1
"""
)

# KEYS: task   ARGV: report_id
# Clear the owed report once it is in the parent's inbox (only if no newer report replaced it meanwhile).
CLEAR_REPORT = """
if redis.call('HGET', KEYS[1], 'report_id') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'report_id', '', 'report', '')
return 1
"""

# KEYS: task   ARGV: field, value. Set the field of an existing record unless it holds a value; returns what it holds.
SET_UNLESS_SET = """
if redis.call('EXISTS', KEYS[1]) == 0 then return '' end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and held ~= '' then return held end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return ARGV[2]
"""

# KEYS: task   ARGV: field, expected value, field to set, its value. Sets it only while the first field holds the
# expected value (1; else 0): a compare-and-set of a task's own hash (store.trace_marks.end_attempt).
HSET_IF_HELD = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return 1
"""

# KEYS: lease, task   ARGV: token, now, field, value, ...
SET_FIELDS = (
    _FENCE
    + """
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[2], 'updated_at', ARGV[2])
return 1
"""
)

# KEYS: lease, task   ARGV: holder, now, exact ('1': the holder must equal ARGV[1]; '0': start with it, e.g. '<pod>:')
# Break the lease of a turn whose process is known to be dead (its pod terminated, or the local supervisor reaped
# it), only while that process still holds it; the record goes idle as a released one would. Safe because every
# write of a turn is fenced by its token: a process that outlived its pod writes nothing.
BREAK_LEASE = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if not holder then return 0 end
if ARGV[3] == '1' then
  if holder ~= ARGV[1] then return 0 end
elseif string.sub(holder, 1, string.len(ARGV[1])) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('HGET', KEYS[2], 'lease_holder') == holder then
  """ + mark_idle("ARGV[2]") + """end
return 1
"""

# KEYS: lease, task   ARGV: token ('' = only if no lease), now, reason
# The watchdog's reset of a reaped turn: release the lease only if it still holds the reaped turn's token (or nobody
# holds it), then mark the task idle and count the reap. A zombie turn that wakes up later finds the lease gone and
# every fenced write refused (LeaseLost).
REAP_RESET = (
    """
local current = redis.call('HGET', KEYS[1], 'token')
if current and current ~= ARGV[1] then return 0 end
if current then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  """
    + mark_idle("ARGV[2]", "'last_reap_reason', ARGV[3], 'last_reap_at', ARGV[2]")
    + """  redis.call('HINCRBY', KEYS[2], 'reaps', 1)
end
return 1
"""
)

# KEYS: operator, opjobs, opreaped   ARGV: job name, turn, failed (0/1/2 = succeeded/failed/deleted), reason,
# retry_at, source
# The operator's accounting of one ended turn attempt, exactly once (its Job's name is remembered in a set), whoever
# records it first: the Job's outcome (source 'job') or the watchdog's reap (source 'watchdog', also remembered in
# uc:{T}:opreaped, so the Job's own outcome, when it shows later, is told apart from a repeat: -2 once, then -1).
ACCOUNT_JOB_END = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  if ARGV[6] == 'job' and redis.call('SREM', KEYS[3], ARGV[1]) == 1 then return -2 end
  return -1
end
if ARGV[6] == 'watchdog' then redis.call('SADD', KEYS[3], ARGV[1]) end
redis.call('HINCRBY', KEYS[1], 'ended:' .. ARGV[2], 1)
if ARGV[3] == '1' then
  local n = redis.call('HINCRBY', KEYS[1], 'failed', 1)
  redis.call('HSET', KEYS[1], 'last_failure', ARGV[4], 'retry_at', ARGV[5])
  return n
elseif ARGV[3] == '0' then
  redis.call('HSET', KEYS[1], 'failed', 0, 'retry_at', 0)
end
return 0
"""


# Conversations (store.conversations). A post: KEYS meta, posts, post ids; ARGV id, kind, sender kind, sender, text,
# at, max posts kept, "1" when a closed conversation takes it (its own closing note). Returns its seq; 0: that id was
# posted before; -1: no conversation; -2: closed.
CONVERSATION_POST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'status') == 'closed' and ARGV[8] ~= '1' then return -2 end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('RPUSH', KEYS[2], cjson.encode({seq = seq, id = ARGV[1], kind = ARGV[2], sender_kind = ARGV[3],
                                          sender = ARGV[4], text = ARGV[5], at = tonumber(ARGV[6])}))
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[7]), -1)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[6])
return seq
"""

# A post delivered (store.conversations.deliver): KEYS meta, posts, post ids; ARGV the seq delivered up to as the
# deliverer read it, the post's seq, hand-off "1", new round "1", held by the limit "1", the note's id and text, now,
# max posts kept. Compare-and-set: 0 when another deliverer moved on first (nothing changed).
CONVERSATION_DELIVERED = """
if tonumber(redis.call('HGET', KEYS[1], 'delivered') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'delivered', ARGV[2])
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'handoffs', 0, 'limited', 0) end
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[1], 'handoffs', 1) end
if ARGV[5] == '1' and redis.call('HGET', KEYS[1], 'limited') ~= '1' then
  redis.call('HSET', KEYS[1], 'limited', 1)
  if redis.call('SISMEMBER', KEYS[3], ARGV[6]) == 0 then
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('RPUSH', KEYS[2], cjson.encode({seq = seq, id = ARGV[6], kind = 'note', sender_kind = 'system',
                                              sender = '', text = ARGV[7], at = tonumber(ARGV[8])}))
    redis.call('SADD', KEYS[3], ARGV[6])
    redis.call('LTRIM', KEYS[2], -tonumber(ARGV[9]), -1)
  end
end
return 1
"""

# A member's join or leave: KEYS meta, members; ARGV member key, its record (JSON, "since" filled in here with the
# current seq), "join" | "leave". Returns 1 when it changed, 0 when it was so already, -1: no conversation, -2: closed.
CONVERSATION_MEMBER = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'status') == 'closed' then return -2 end
local held = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[3] == 'join' then
  if held and not cjson.decode(held).left then return 0 end
  local record = cjson.decode(ARGV[2])
  record.since = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
  redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(record))
  return 1
end
if not held then return 0 end
local record = cjson.decode(held)
if record.left then return 0 end
record.left = true
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(record))
return 1
"""


# A conversation removed by retention (store.conversation_retention): KEYS meta, posts, post ids, members; ARGV the
# meta's seq, status, delivered and updated_at as archived. 1: removed; 0: it changed since (nothing removed).
CONVERSATION_REMOVE = """
local now = redis.call('HMGET', KEYS[1], 'seq', 'status', 'delivered', 'updated_at')
for i = 1, 4 do
  if (now[i] or '') ~= ARGV[i] then return 0 end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
"""
