"""Redis ACL users of agent namespaces: what a turn pod's own Redis identity may do.

On Kubernetes every task id is ``<namespace>/<name>``, so every key of a task starts with ``uc:{<namespace>/``. The
operator gives each agent namespace a Redis user (``namespace_user``) whose rules (``namespace_rules``, pure) allow:

- on the namespace's own task keys (one pattern per part a turn uses: ``uc:{<namespace>/*}:task``, ``...:inbox``,
  ...; the operator's per-task accounting, ``operator``/``opjobs``/``opreaped``, is left out), exactly the commands
  the runtime sends for a turn, its tools, spawns and reports (``TASK_COMMANDS``), scripts included: Redis checks
  every command a script calls against the caller's ACL, and they all touch the task's own keys;
- on the people's decisions of its tasks' waiting calls (``uc:{<namespace>/*}:decisions``, ``READ_ONLY_PARTS``):
  HGET/HMGET/HGETALL only, as read-only key patterns (``%R~``): only the deciders (task API, local CLI, the
  operator's timeout) write them, so a turn pod cannot approve its own calls (``store.approvals``);
- on the namespace's own activation stream and stream of task changes (``uc:{<namespace>/}:activations``,
  ``...:changes``; each namespace has its own, so none can poison another's): XADD only (no XREAD/XRANGE);
- on the shared keys, one selector each with only what a turn writes there (``SHARED_SELECTORS``):
  ZADD/ZREM on the heartbeat index (no reads), HINCRBYFLOAT/HSET on the telemetry hashes (no
  reads), the throttle scripts on ``uc:throttle:*`` (read and write: the model throttle is shared on purpose) and
  GET/SET of the Bedrock model-name cache;
- EXISTS of the scripted model's gates of its tasks (``uc:{<namespace>/*}:gate:*``, ``store.gates``), read only:
  a test opens them with the admin identity;
- its warm turn pods' records (``uc:{<namespace>/}:warmpod:*``: HSET and PEXPIRE) and assignments
  (``...:warmassign:*``: XREAD, read only), ``store.warm_pods``; never the operator's fence of them;
- GET of the namespace's agent definitions (``uc:agent:{<namespace>/*}``, ``state.agents``): a turn reads its
  task's agent and spawns by agent name, and never writes one (only the operator stores what the Agents say);
- nothing else: no ``uc:tasks`` (only the operator and local mode index tasks), no SCAN/KEYS/INFO/MONITOR/CLIENT/
  CONFIG/FLUSH*, no channels, no ``uc:faults:*`` (the test-only fault harness runs with the admin URL).

Another namespace's keys answer ``NOPERM``. The rules need Redis 7 (selectors). ``check_acl_rights`` tells, in one
line, when the caller's own user may not create such users (or the server does not take the rules). What stays shared
and what a namespace can still do to others through it (write-only entries in the shared keys, Lua that runs long):
docs/install.md, "Redis identities".
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import RedisCluster

from unicore.store.client import RedisClient
from unicore.store.keys import (
    BEDROCK_MODELS_CACHE,
    GATE_PART,
    HEARTBEATS_INDEX,
    METRICS_COUNTERS,
    METRICS_GAUGES,
    METRICS_HISTOGRAMS,
    THROTTLE_PREFIX,
    TaskKeys,
    agent_key,
    namespace_activations_stream,
    namespace_changes_stream,
    task_key,
    warm_assignment_stream,
    warm_pod_key,
)

USER_PREFIX = "unicore-ns-"  # + the namespace: the Redis user of that namespace's turn pods
CHECK_USER = "unicore-acl-check"  # created disabled and deleted again by check_acl_rights (not a namespace's user)
_GLOB = "*?[]\\"

# The parts of a task's keys (TaskKeys) a turn, its tools, spawns and reports use; the operator's own records of a
# task (operator, opjobs, opreaped: failure counts, retry times, the Jobs it accounted) stay out of a tenant's reach.
OPERATOR_PARTS = ("operator", "opjobs", "opreaped", "opcmdjobs")
# Parts a turn reads and never writes: people's decisions on its waiting calls (store.approvals): a turn pod that
# could write them could approve its own gated calls in a person's name.
READ_ONLY_PARTS = ("decisions",)
READ_ONLY_COMMANDS = ("hget", "hmget", "hgetall")
# The scripted model's gates (store.gates): a turn asks whether its gate is open; only a test opens one.
GATE_COMMAND = "exists"
TURN_PARTS = tuple(
    key.rsplit(":", 1)[1] for key in TaskKeys("x").all()
    if key.rsplit(":", 1)[1] not in (*OPERATOR_PARTS, *READ_ONLY_PARTS)
)

# Commands a turn sends on its namespace's task keys, directly or inside the store package's Lua scripts
# (store/lua.py, slots.py, reports.py, TaskStore's tasks.py, task_*.py, inbox.py and turn_writes.py, reads.py,
# tree_reads.py, token_stream.py).
TASK_COMMANDS = (
    "exists", "get", "set", "del", "incr", "pexpire",
    "hget", "hmget", "hgetall", "hset", "hexists", "hincrby",
    "llen", "lrange", "lindex", "rpush", "ltrim",
    "hdel", "lset", "lrem",  # state/approvals.py: a held result queued, an ask_user answer taken from the inbox
    "zadd", "zrem", "zrange", "zcard", "zscore",
    "xadd",  # the live token stream (state/token_stream.py): written, never read, by a turn
    "eval", "evalsha",
)
# Commands without keys a client needs: health checks, SELECT of the URL's database, the script cache (redis-py
# loads a script with SCRIPT EXISTS/LOAD before a pipeline runs it), TIME (the throttle scripts' clock), and what a
# Redis Cluster client asks when it starts (slot map, command table, READONLY).
KEYLESS_COMMANDS = (
    "ping", "echo", "select", "time", "script|load", "script|exists",
    "readonly", "cluster|slots", "cluster|shards", "command",
)
# (commands, key patterns) of each shared key a turn writes (one selector each).
SHARED_SELECTORS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("zadd", "zrem"), (HEARTBEATS_INDEX,)),  # acquire / renew / release of a lease
    (("hincrbyfloat",), (METRICS_COUNTERS, METRICS_HISTOGRAMS)),  # Telemetry.incr / observe
    (("hset",), (METRICS_GAUGES,)),  # Telemetry.set_gauge
    # ThrottleState: its scripts (state/throttle.py) and the multiplier read
    (("eval", "evalsha", "hget", "hset", "hdel", "hmget", "pexpire", "zadd", "zrange", "zrangebyscore",
      "zremrangebyscore", "zscore"), (THROTTLE_PREFIX + "*",)),
    (("get", "set"), (BEDROCK_MODELS_CACHE.replace("{region}", "*"),)),  # state.model_cache
)


class AclUnavailable(Exception):
    """The caller's Redis user may not manage ACL users, or the server does not accept the rules (one line)."""


def glob_escape(text: str) -> str:
    """``text`` with Redis glob characters escaped, to match it literally in a key pattern."""
    return "".join("\\" + ch if ch in _GLOB else ch for ch in text)


def _check_namespace(namespace: str) -> None:
    bad = not namespace or any(ch.isspace() or ch in "/{}" or not ch.isprintable() for ch in namespace)
    if bad:
        raise ValueError(f"not a namespace: {namespace!r}")


def namespace_user(namespace: str) -> str:
    """The Redis user of ``namespace``'s turn pods."""
    _check_namespace(namespace)
    return USER_PREFIX + namespace


def namespace_key_patterns(namespace: str) -> list[str]:
    """The key patterns of ``namespace``'s tasks a turn may use (without the leading ``~``)."""
    _check_namespace(namespace)
    return [task_key(glob_escape(namespace) + "/*", part) for part in TURN_PARTS]


def namespace_read_only_patterns(namespace: str) -> list[str]:
    """The key patterns of ``namespace``'s tasks a turn may read, not write (without the ``%R~``)."""
    _check_namespace(namespace)
    return [task_key(glob_escape(namespace) + "/*", part) for part in READ_ONLY_PARTS]


def namespace_gate_pattern(namespace: str) -> str:
    """The key pattern of the scripted model's gates of ``namespace``'s tasks (``keys.gate_key``): read only."""
    _check_namespace(namespace)
    return task_key(glob_escape(namespace) + "/*", GATE_PART + ":*")


def namespace_rules(namespace: str) -> list[str]:
    """The ACL rules of ``namespace``'s user, as ACL SETUSER arguments, without password or on/off (pure)."""
    rules = ["-@all", *(f"+{command}" for command in (*TASK_COMMANDS, *KEYLESS_COMMANDS))]
    rules += [f"~{pattern}" for pattern in namespace_key_patterns(namespace)]
    rules.append("resetchannels")
    for commands, keys in SHARED_SELECTORS:
        rules.append("(" + " ".join([*(f"+{c}" for c in commands), *(f"~{k}" for k in keys)]) + ")")
    # Its own activation stream (TaskStore.activate) and stream of task changes (state.changes): XADD only. Never a
    # stream another namespace's tasks use: Redis cannot limit XADD's arguments, and an entry with the largest id or
    # MAXLEN 0 in a shared stream would stop every namespace's wake-ups.
    escaped = glob_escape(namespace)
    rules.append(f"(+xadd ~{namespace_activations_stream(escaped)} ~{namespace_changes_stream(escaped)})")
    rules.append(f"(+get ~{agent_key(glob_escape(namespace) + '/*')})")  # its Agents' definitions: read only
    # Its warm turn pods (store.warm_pods): a pod writes its own record and reads its assignment; the fence that says
    # which pod runs which turn, and the assignments themselves, are the operator's to write
    rules.append(f"(+hset +pexpire ~{warm_pod_key(escaped, '*')})")
    rules.append(f"(+xread %R~{warm_assignment_stream(escaped, '*')})")
    # People's decisions on its tasks' calls: read only (``%R~``: no write command on them, even if one is added
    # above); no script of a turn may name them either (EVAL's keys count as written)
    rules.append("(" + " ".join([*(f"+{c}" for c in READ_ONLY_COMMANDS),
                                 *(f"%R~{p}" for p in namespace_read_only_patterns(namespace))]) + ")")
    # The scripted model's gates of its tasks (store.gates): EXISTS only; a test opens them with the admin identity
    rules.append(f"(+{GATE_COMMAND} %R~{namespace_gate_pattern(namespace)})")
    return rules


def setuser_args(namespace: str, password: str) -> list[str]:
    """``ACL SETUSER`` arguments that make ``namespace``'s user exactly this: enabled, only ``password``, the rules
    (``reset`` first, so a repeat, a changed rule set or a new password replaces whatever the user had)."""
    if not password or any(ch.isspace() for ch in password):
        raise ValueError("a Redis password may not be empty or contain whitespace")
    return [namespace_user(namespace), "reset", "on", f">{password}", *namespace_rules(namespace)]


def _acl(client: RedisClient, *args: str) -> Any:
    """An ACL command; on a Redis Cluster on every node (ACL users are per node and not propagated)."""
    if isinstance(client, RedisCluster):
        return client.execute_command(*args, target_nodes=RedisCluster.ALL_NODES)
    return client.execute_command(*args)


def apply_namespace_user(client: RedisClient, namespace: str, password: str) -> None:
    """Create or update ``namespace``'s user (idempotent). Raises RedisError (NOPERM: the caller may not)."""
    _acl(client, "ACL SETUSER", *setuser_args(namespace, password))


def delete_namespace_user(client: RedisClient, namespace: str) -> None:
    """Delete ``namespace``'s user (its open connections are closed); nothing when there is none."""
    _acl(client, "ACL DELUSER", namespace_user(namespace))


def _whoami(client: RedisClient) -> str:
    try:
        name = client.execute_command("ACL WHOAMI")
    except redis.RedisError:
        return "?"
    return name.decode() if isinstance(name, bytes) else str(name)


def check_acl_rights(client: RedisClient) -> None:
    """Create (disabled) and delete a user with a namespace's rules, as the identity provisioning would: raises
    AclUnavailable with one line saying why not (NOPERM: the caller's user lacks the rights; ERR: the server does
    not take the rules, e.g. Redis older than 7 has no selectors, or ACL commands are disabled)."""
    args = [CHECK_USER, "reset", "off", *namespace_rules("acl-check")]
    try:
        _acl(client, "ACL SETUSER", *args)
        _acl(client, "ACL DELUSER", CHECK_USER)
    except redis.ResponseError as exc:
        reply = " ".join(str(exc).split())
        if isinstance(exc, redis.exceptions.NoPermissionError) or reply.upper().startswith("NOPERM"):
            raise AclUnavailable(
                f"Redis user {_whoami(client)!r} may not manage ACL users (NOPERM {reply}): grant it "
                "+acl|setuser +acl|deluser +acl|whoami, or turn per-namespace Redis identities off"
            ) from None
        raise AclUnavailable(
            f"Redis refused a namespace user's rules ({reply}): per-namespace identities need Redis 7 or newer "
            "with ACL commands enabled; or turn them off"
        ) from None


def new_password() -> str:
    """A random password (256 bits, hex: no character needs quoting in a URL or an ACL rule)."""
    return secrets.token_hex(32)


_CREDENTIAL_QUERY = frozenset({"username", "password"})


def identity_url(url: str, user: str, password: str) -> str:
    """``url`` (any REDIS_URL form: redis, rediss, unix, redis+cluster, ...) with its credentials replaced by
    ``user``/``password``; the address, database and options stay."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in _CREDENTIAL_QUERY])
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_credentials(url: str) -> tuple[str, str] | None:
    """(user, password) in ``url``'s authority; None when it names no user or no password."""
    parts = urlsplit(url)
    if parts.username is None or not parts.password:
        return None
    return unquote(parts.username), unquote(parts.password)


def same_address(url: str, other: str) -> bool:
    """Whether the two URLs name the same Redis (scheme, host, port, path, options), credentials aside."""
    return identity_url(url, "u", "p") == identity_url(other, "u", "p")


def acl_users(client: RedisClient) -> Sequence[str]:
    """The names of the server's ACL users (ACL USERS)."""
    return [name.decode() if isinstance(name, bytes) else str(name) for name in client.execute_command("ACL USERS")]


__all__ = ["AclUnavailable", "CHECK_USER", "READ_ONLY_PARTS", "SHARED_SELECTORS", "TASK_COMMANDS", "TURN_PARTS",
           "USER_PREFIX", "acl_users", "apply_namespace_user", "check_acl_rights", "delete_namespace_user",
           "glob_escape", "identity_url", "namespace_gate_pattern", "namespace_key_patterns",
           "namespace_read_only_patterns", "namespace_rules",
           "namespace_user", "new_password", "same_address", "setuser_args", "url_credentials"]
