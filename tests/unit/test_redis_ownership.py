"""One owner for the Redis layout: no Redis command is called outside ``unicore/store``.

The operator, the watchdog, the task API, the metrics exporter, the tools and the launchers read and write Redis
through typed functions of ``unicore.store`` (``operator_state``, ``heartbeats``, ``activations``, ``reads``,
``tree_reads``, ...), so key names, hash fields, scripts and pipelining live in one package.

Every ``.py`` file of the production packages outside ``unicore/store`` is parsed with ``ast``; an attribute call
whose method is a Redis command is flagged. Command names that are also common Python methods (``get``, ``set``,
``delete``, ``exists``, ``incr``, ...) are flagged only on a receiver that names a Redis client or pipeline
(``self.redis.get``, ``ctx.redis.aio.delete``, ``pipe.exists``), so ``dict.get``, ``Path.exists`` and
``Telemetry.incr`` pass."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [REPO / "core" / "unicore", REPO / "operator" / "unicore_operator", REPO / "client" / "unicore_client",
            REPO / "hack" / "unicore_devcluster"]
OWNER = REPO / "core" / "unicore" / "store"

# Names no other library of this code base uses for a method: flagged on any receiver.
REDIS_COMMANDS = frozenset("""
    hget hgetall hmget hset hsetnx hdel hexists hincrby hincrbyfloat hkeys hvals hlen hscan_iter
    lrange llen lindex lpush rpush lpop rpop ltrim lrem lset blpop brpop
    zadd zrem zrange zrangebyscore zrevrange zrevrangebyscore zcard zscore zmscore zincrby zremrangebyscore zcount
    smembers sadd srem sismember smismember scard sscan_iter scan_iter
    pipeline eval evalsha register_script script_load
    xadd xread xreadgroup xack xautoclaim xclaim xgroup_create xpending xrange xrevrange xlen xtrim xdel
    expire pexpire expireat persist ttl pttl mget mset setnx getdel incrby decrby
""".split())
# Also ordinary method names: flagged only when the receiver names a Redis client or pipeline.
GENERIC_COMMANDS = frozenset({"get", "set", "delete", "exists", "incr", "decr", "keys", "scan", "unlink", "type"})
REDIS_RECEIVERS = frozenset({"redis", "_redis", "redis_client", "aio", "sync", "pipe"})


def _receiver_name(node: ast.expr) -> str:
    """The last name of a call's receiver: ``ctx.redis.aio`` -> ``aio``, ``pipe`` -> ``pipe``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def redis_calls(source: str) -> list[tuple[int, str]]:
    """(line, ``<receiver>.<command>``) of every Redis command call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, receiver = node.func.attr, _receiver_name(node.func.value)
        if method in REDIS_COMMANDS or (method in GENERIC_COMMANDS and receiver in REDIS_RECEIVERS):
            found.append((node.lineno, f"{receiver or '...'}.{method}"))
    return found


def test_the_checked_packages_exist() -> None:
    """A package moved away would leave the check below passing over nothing."""
    assert [path for path in (*PACKAGES, OWNER) if not path.is_dir()] == []


def test_no_redis_command_outside_the_store_package() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {call}()"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if OWNER not in path.parents
        for line, call in redis_calls(path.read_text())
    ]
    assert offenders == [], "Redis commands outside unicore/store (move them there):\n" + "\n".join(offenders)


def test_the_check_sees_commands_and_spares_ordinary_methods() -> None:
    planted = """
pipe = ctx.redis.aio.pipeline(transaction=False)
pipe.hgetall(key)
status = self.redis.hget(key, "status")
await ctx.redis.aio.delete(*keys)
beat = pipe.get(heartbeat_key)
client.xreadgroup(group, consumer, streams)
script = client.register_script(SOURCE)
value = options.get("a")
if path.exists():
    store.delete_task(task_id)
telemetry.incr("turns_total")
store.exists(task_id)
"""
    assert sorted(redis_calls(planted)) == [
        (2, "aio.pipeline"), (3, "pipe.hgetall"), (4, "redis.hget"), (5, "aio.delete"), (6, "pipe.get"),
        (7, "client.xreadgroup"), (8, "client.register_script"),
    ]


CLIENT_PARAMETERS = frozenset({"client", "pipe", "redis", "redis_client"})


def untyped_clients(source: str, names: frozenset[str] = CLIENT_PARAMETERS) -> list[tuple[int, str]]:
    """(line, name) of every parameter or field among ``names`` annotated ``Any`` (or ``Any | None``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg):
            name, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, annotation = node.target.id, node.annotation
        else:
            continue
        if name in names and annotation is not None and "Any" in ast.unparse(annotation).split(" | "):
            found.append((node.lineno, name))
    return found


def test_the_store_takes_its_clients_typed() -> None:
    """A store function names the client it takes (``unicore.store.client.RedisClient`` or its pipeline and asyncio
    siblings), never ``Any``; elsewhere a parameter named ``redis``/``redis_client`` is one too."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {name}: Any"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        for line, name in untyped_clients(path.read_text(), CLIENT_PARAMETERS if OWNER in path.parents
                                          else frozenset({"redis", "redis_client"}))
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_client_check_sees_any() -> None:
    planted = """
def a(client: Any, pipe: RedisPipeline) -> None: ...
def b(*, redis: Any | None = None, redis_client: RedisClient | None = None) -> None: ...
class C:
    client: Any
    other: Any
"""
    assert sorted(untyped_clients(planted)) == [(2, "client"), (3, "redis"), (5, "client")]


REDIS_ATTRIBUTES = ("redis", "_redis")


def _redis_getattrs(tree: ast.AST) -> list[ast.Call]:
    """Every ``getattr`` of a Redis attribute: ``getattr(x, "redis"...)``, or ``getattr(x, name...)`` in a loop
    whose ``name`` runs over literal names among which is ``"redis"`` (``for name in ("redis", "client"): ...``)."""
    loop_names: dict[int, set[str]] = {}  # id of a getattr call -> the loop variables that name "redis" around it
    for loop in ast.walk(tree):
        if (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
                and isinstance(loop.iter, ast.Tuple | ast.List | ast.Set)
                and any(isinstance(item, ast.Constant) and item.value in REDIS_ATTRIBUTES for item in loop.iter.elts)):
            for inner in ast.walk(loop):
                loop_names.setdefault(id(inner), set()).add(loop.target.id)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2):
            continue
        name = node.args[1]
        if (isinstance(name, ast.Constant) and name.value in REDIS_ATTRIBUTES) or (
                isinstance(name, ast.Name) and name.id in loop_names.get(id(node), set())):
            found.append(node)
    return found


def store_reach_throughs(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every ``.redis`` read off a task store: ``store.redis``, ``self.store.redis``,
    ``ctx.store.redis`` (any receiver whose last name is ``store`` or ends in ``_store``); and every ``getattr`` of
    a ``redis`` attribute (``_redis_getattrs``), whatever holds it: behind ``getattr`` a store goes by any name."""
    tree = ast.parse(source)
    found = [(call.lineno, ast.unparse(call)) for call in _redis_getattrs(tree)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "redis":
            receiver = _receiver_name(node.value)
            if receiver == "store" or receiver.endswith("_store"):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_caller_reaches_through_the_store_for_its_client() -> None:
    """Outside ``unicore/store`` a holder of a ``TaskStore`` asks it (its methods) or hands it to a store function
    that takes one; what works on a client itself (the supervisor, a model, the UI's tree feed) takes the client its
    caller connected, never the one inside a store."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {expression}"
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if OWNER not in path.parents
        for line, expression in store_reach_throughs(path.read_text())
    ]
    assert offenders == [], "the store's client read outside unicore/store:\n" + "\n".join(offenders)


def test_the_reach_through_check_sees_every_store() -> None:
    planted = """
client = store.redis
approvals.decide(self.store.redis, task_id)
read_after(api.store.redis, task_id, "0")
task_store.redis.ping()
await ctx.redis.aio.ping()
self.redis = client
restored.redis
client = getattr(holder, "redis")
client = getattr(self.backend, "redis", None)
client = getattr(store, "_redis", None)
name = getattr(options, "redis_url", "")
value = getattr(holder, name)
for name in ("redis", "client", "r"):
    client = getattr(store, name, None)
for name in ("url", "host"):
    value = getattr(options, name, None)
"""
    assert sorted(store_reach_throughs(planted)) == [
        (2, "store.redis"), (3, "self.store.redis"), (4, "api.store.redis"), (5, "task_store.redis"),
        (9, "getattr(holder, 'redis')"), (10, "getattr(self.backend, 'redis', None)"),
        (11, "getattr(store, '_redis', None)"), (15, "getattr(store, name, None)"),
    ]
