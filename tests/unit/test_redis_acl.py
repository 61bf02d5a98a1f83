"""The ACL rules of a namespace's Redis user (``unicore.store.acl``), pure; the same rules on a real redis-server are in
tests/integration/test_redis_identities.py."""

from __future__ import annotations

import re

import pytest
from redis.connection import parse_url
from unicore.store import acl
from unicore.store.keys import ACTIVATIONS_STREAM, CHANGES_STREAM, HEARTBEATS_INDEX, TASKS_INDEX, TaskKeys


def redis_glob(pattern: str) -> re.Pattern[str]:
    """A Redis key pattern (``*``, ``?``, ``[...]``, backslash escapes) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
            continue
        out += {"*": ".*", "?": "."}.get(ch, re.escape(ch))
        i += 1
    return re.compile(out + r"\Z", re.S)


def allowed_keys(namespace: str) -> list[re.Pattern[str]]:
    return [redis_glob(p) for p in acl.namespace_key_patterns(namespace)]


def covered(key: str, namespace: str) -> bool:
    return any(p.match(key) for p in allowed_keys(namespace))


def test_the_patterns_cover_every_key_a_turn_uses_of_the_namespaces_tasks_and_no_other() -> None:
    for task in ("team-a/root", "team-a/root-kid-grandkid", "team-a/" + "x" * 253):
        keys = TaskKeys(task)
        operator = {keys.operator, keys.operator_jobs, keys.operator_reaped, keys.operator_command_jobs}
        assert all(covered(key, "team-a") for key in keys.all() if key not in (*operator, keys.decisions))
        assert not any(covered(key, "team-a") for key in operator)  # the operator's records of the task
        assert not covered(keys.decisions, "team-a")  # people's decisions: read only (below)
    for other in ("team-b/root", "team-a-2/root", "team/a", "team-a", "xteam-a/root", "default/team-a"):
        assert not any(covered(key, "team-a") for key in TaskKeys(other).all()), other
    for shared in (ACTIVATIONS_STREAM, CHANGES_STREAM, TASKS_INDEX, HEARTBEATS_INDEX, "uc:metrics:counters",
                   "uc:faults:x"):
        assert not covered(shared, "team-a")


def test_glob_characters_in_a_namespace_match_only_themselves() -> None:
    assert acl.namespace_key_patterns("a*b")[0] == "uc:{a\\*b/*}:task"
    assert covered(TaskKeys("a*b/t").task, "a*b")
    assert not covered(TaskKeys("aXXb/t").task, "a*b") and not covered(TaskKeys("a?b/t").task, "a*b")
    assert covered(TaskKeys("a[1]/t").task, "a[1]") and not covered(TaskKeys("a1/t").task, "a[1]")


@pytest.mark.parametrize("bad", ["", "a b", "a/b", "a{b", "a}b", "a\nb", "a\x00b"])
def test_a_name_that_is_no_namespace_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        acl.namespace_rules(bad)


def selectors() -> dict[tuple[str, ...], set[str]]:
    """key patterns -> commands, of each selector of a namespace's rules."""
    found: dict[tuple[str, ...], set[str]] = {}
    for rule in acl.namespace_rules("team-a"):
        if rule.startswith("("):
            words = rule.strip("()").split()
            keys = tuple(sorted(w[1:] for w in words if w.startswith("~")))
            found[keys] = {w[1:] for w in words if w.startswith("+")}
    return found


def root_commands() -> set[str]:
    return {r[1:] for r in acl.namespace_rules("team-a") if r.startswith("+")}


def test_shared_keys_get_only_the_writes_a_turn_makes() -> None:
    shared = selectors()
    # Its own namespace's streams only (issue 25: XADD with the largest id or MAXLEN 0 to a stream every namespace
    # wrote stopped every namespace's wake-ups); no selector names a stream another namespace uses.
    assert shared[("uc:{team-a/}:activations", "uc:{team-a/}:changes")] == {"xadd"}
    assert not any(ACTIVATIONS_STREAM in keys or CHANGES_STREAM in keys for keys in shared)
    assert shared[(HEARTBEATS_INDEX,)] == {"zadd", "zrem"}
    assert shared[("uc:metrics:counters", "uc:metrics:hist")] == {"hincrbyfloat"}
    assert shared[("uc:metrics:gauges",)] == {"hset"}
    assert shared[("uc:bedrock:models:*",)] == {"get", "set"}
    assert "eval" in shared[("uc:throttle:*",)] and "evalsha" in shared[("uc:throttle:*",)]
    assert not any(TASKS_INDEX in keys or any(k.startswith("uc:faults") for k in keys) for keys in shared)


def test_agent_definitions_of_the_namespace_are_read_only() -> None:
    """A turn reads its agent's definition (issue 17) but may not write one: that would widen its own agent."""
    assert selectors()[("uc:agent:{team-a/*}",)] == {"get"}
    assert not any("uc:agent:" in rule for rule in acl.namespace_rules("team-a") if rule.startswith("~"))


def test_the_decisions_of_the_namespaces_tasks_are_read_only() -> None:
    """issue 25: a turn pod that could write its task's approvals approved its own gated calls in a person's name;
    the decisions live in a key it may only read (``%R~``), with read commands only."""
    [rule] = [r for r in acl.namespace_rules("team-a") if "decisions" in r]
    words = rule.strip("()").split()
    assert [w for w in words if not w.startswith("+")] == ["%R~uc:{team-a/*}:decisions"]
    assert {w[1:] for w in words if w.startswith("+")} == {"hget", "hmget", "hgetall"}
    pattern = redis_glob(acl.namespace_read_only_patterns("team-a")[0])
    assert pattern.match(TaskKeys("team-a/root-kid").decisions) and not pattern.match(TaskKeys("team-b/x").decisions)
    assert not pattern.match(TaskKeys("team-a/root").approvals)


def test_nothing_that_reads_across_tenants_or_disturbs_the_server_is_allowed() -> None:
    rules = acl.namespace_rules("team-a")
    assert rules[0] == "-@all" and "resetchannels" in rules and not any(r.startswith(("&", "%", "allkeys", "~*"))
                                                                         for r in rules)
    everything = root_commands() | {c for commands in selectors().values() for c in commands}
    assert not everything & {
        "keys", "scan", "randomkey", "info", "monitor", "client", "config", "debug", "flushall", "flushdb",
        "xread", "xreadgroup", "xrange", "xrevrange", "xlen", "xinfo", "xpending", "smembers", "sscan", "hscan",
        "zscan", "sort", "acl", "script|flush", "script|kill", "function", "fcall", "publish", "subscribe",
        "slowlog", "swapdb", "move", "migrate", "object", "dump", "restore", "rename", "copy", "shutdown",
    }
    assert not any(c.startswith("@") for c in everything)
    assert {"zrange", "zrangebyscore", "hmget"} & selectors()[("uc:throttle:*",)]  # read only where shared on purpose


def test_setuser_args_reset_the_user_to_exactly_the_rules_and_one_password() -> None:
    args = acl.setuser_args("team-a", "s3cret")
    assert args[:4] == ["unicore-ns-team-a", "reset", "on", ">s3cret"] and args[4:] == acl.namespace_rules("team-a")
    for bad in ("", "two words", "tab\there"):
        with pytest.raises(ValueError):
            acl.setuser_args("team-a", bad)


def test_a_new_password_is_long_random_and_needs_no_quoting() -> None:
    first, second = acl.new_password(), acl.new_password()
    assert first != second and len(first) == 64 and re.fullmatch("[0-9a-f]+", first)


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://:admin@unicore-redis.ns.svc:6379/0", "redis://u%3Ax:p%40w@unicore-redis.ns.svc:6379/0"),
    ("redis://operator:admin@h:6379/2", "redis://u%3Ax:p%40w@h:6379/2"),
    ("rediss://h:6380/0?ssl_cert_reqs=required&password=old", "rediss://u%3Ax:p%40w@h:6380/0?ssl_cert_reqs=required"),
    ("unix:///run/redis.sock?db=3", "unix://u%3Ax:p%40w@/run/redis.sock?db=3"),
    ("redis+cluster://:admin@node-0:7000", "redis+cluster://u%3Ax:p%40w@node-0:7000"),
])
def test_the_identity_url_is_the_operators_url_with_the_users_credentials(url: str, expected: str) -> None:
    made = acl.identity_url(url, "u:x", "p@w")
    assert made == expected
    assert acl.url_credentials(made) == ("u:x", "p@w")
    assert acl.same_address(made, url)
    if not url.startswith("redis+cluster"):
        parsed = parse_url(made)  # what redis-py logs in with
        assert (parsed["username"], parsed["password"]) == ("u:x", "p@w")


def test_addresses_differ_when_host_port_database_or_options_do() -> None:
    base = "redis://:a@h:6379/0"
    assert acl.same_address(base, "redis://u:b@h:6379/0")
    for other in ("redis://:a@h2:6379/0", "redis://:a@h:6380/0", "redis://:a@h:6379/1", "rediss://:a@h:6379/0",
                  "redis://:a@h:6379/0?ssl_cert_reqs=none"):
        assert not acl.same_address(base, other), other
    assert acl.url_credentials("redis://h:6379/0") is None and acl.url_credentials("redis://u@h") is None
