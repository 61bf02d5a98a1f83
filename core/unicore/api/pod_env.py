"""The environment of a turn pod: every variable the operator's Job builder gives the turn container
(``unicore_operator.job_builder``, and ``unicore_operator.mcp_servers`` for the MCP servers), with who sets it and
who reads it. The runtime reads them by these names (``unicore.settings.RuntimeSettings`` and the modules named
below); local mode's supervisor (``unicore.launch.local``) sets some of them for its turn processes too.

Knobs a deployment adds to its turn pods itself (the chart's ``agent.extraEnv`` and ``agent.envSecret``:
``UNICORE_OPENAI_RPM``, ``UNICORE_BEDROCK_*``, ``UNICORE_CONTEXT_WINDOWS``, ``UNICORE_EXTRA_TOOLS``, ...) are not
here: each is spelled once, by the settings class that reads it. tests/unit/test_pod_env.py holds the Job builder to
this list.
"""

from __future__ import annotations

REDIS_URL = "REDIS_URL"
"""Set by the Job builder: the namespace's own Redis user's URL from its Secret (``redis_identities``), else the
shared Secret's, else the operator's own URL; by local mode for its turns. Read by ``RuntimeSettings.redis_url``,
``unicore.store.tasks.connect`` and the fault harness (``unicore.faults``)."""

TASK_ID = "UNICORE_TASK_ID"
"""Set by the Job builder (``<namespace>/<name>``) and local mode. Read by ``RuntimeSettings.task_id``: the task
``unicore-turn`` runs when its argument names none (``unicore.turn.entry``)."""

SPAWNER = "UNICORE_SPAWNER"
"""Set by the Job builder (``kubernetes``) and local mode (``local``). Read by ``RuntimeSettings.spawner``: how
``spawn_task`` makes children (``unicore.turn.entry``: ``unicore.launch.k8s_spawner`` or the local spawner)."""

NAMESPACE = "UNICORE_NAMESPACE"
"""Set by the Job builder (the task's namespace). Read by ``RuntimeSettings.namespace``: where the Kubernetes
spawner creates child AgentTasks (``unicore.launch.k8s_spawner``)."""

WORKSPACE = "UNICORE_WORKSPACE"
"""Set by the Job builder (``/workspace``: the tree's folder of the workspace claim, else an emptyDir). Read by
``RuntimeSettings.workspace``: the file tools' root (``unicore.turn.defaults``)."""

HOME = "HOME"
"""Set by the Job builder to ``/tmp`` (the root filesystem is read-only and ``/tmp`` a writable emptyDir). Read by
Python itself (``Path.home``, ``~``) and the libraries that keep files there, not by UniCore's code."""

POD_NAME = "UNICORE_POD_NAME"
"""Set by the Job builder from the downward API (``metadata.name``). Read by ``unicore.store.task_leases``: the lease
holder id ``<pod>:<pid>``, which the watchdog matches against turn pods (outside Kubernetes the host name stands
in)."""

STALL_SECONDS = "UNICORE_STALL_SECONDS"
"""Set by the Job builder when the operator has one (its own ``UNICORE_STALL_SECONDS``). Read by
``RuntimeSettings.stall_seconds``: a step running longer counts as hung (``unicore.turn.progress``)."""

OPENAI_ENDPOINTS = "UNICORE_OPENAI_ENDPOINTS"
"""Set by the Job builder when the operator has an endpoint map (URLs, model names, Secret names, never a key). Read
by ``unicore.providers.endpoints``: which endpoint serves an ``openai:<name>`` model."""

OPENAI_KEY_PREFIX = "UNICORE_OPENAI_KEY_"
"""``UNICORE_OPENAI_KEY_<entry index>``: set by the Job builder from the endpoint's key Secret (a ``secretKeyRef``)
for the endpoint of the task's model, unless the entry names its own ``apiKeyEnv``. Read by
``unicore.providers.endpoints`` (the map it gets names the variable)."""

MCP_SERVERS = "UNICORE_MCP_SERVERS"
"""Set by the operator (``unicore_operator.mcp_servers``: the MCPServers the task and its Agent use, resolved) and
by local mode (the tree's ``--mcp-server`` files). Read by ``RuntimeSettings.mcp_servers``
(``unicore.tools.mcp_tools``)."""

MCP_HEADER_PREFIX = "UNICORE_MCP_HEADER_"
"""``UNICORE_MCP_HEADER_<server>_<header>`` (index numbers): set by the operator from each ``headersFrom`` Secret key
(a ``secretKeyRef``). Read by ``unicore.tools.mcp_client``, by the names ``UNICORE_MCP_SERVERS``'s
``headersFromEnv`` gives."""

EXEC_SOCKET = "UNICORE_EXEC_SOCKET"
"""Set by the Job builder when the task may use ``run_command`` (``unicore_operator.workbench_pod``: the workbench's
exec server socket, ``/unicore-exec/exec.sock``). Read by ``RuntimeSettings.exec_socket``: ``run_command`` runs
commands there (``unicore.commands.exec_client``) instead of in a local sandbox."""

WARM_POOL = "UNICORE_WARM_POOL"
"""Set by the warm Job builder (``unicore_operator.warm_pool``): the pool a warm turn pod waits in. Read by
``RuntimeSettings.warm_pool`` (``unicore.turn.warm``, ``unicore-turn --warm``)."""

WARM_TEMPLATE = "UNICORE_WARM_TEMPLATE"
"""Set by the warm Job builder: the hash of the pod template the warm pod was built from. Read by
``RuntimeSettings.warm_template``; the pod writes it into its record (``unicore.store.warm_pods``)."""

WARM_MAX_WAIT_SECONDS = "UNICORE_WARM_MAX_WAIT_SECONDS"
"""Set by the warm Job builder: how long a warm pod waits for a turn before it exits unused. Read by
``RuntimeSettings.warm_max_wait_seconds``."""

VARIABLES = (REDIS_URL, TASK_ID, SPAWNER, NAMESPACE, WORKSPACE, HOME, POD_NAME, STALL_SECONDS, OPENAI_ENDPOINTS,
             MCP_SERVERS, EXEC_SOCKET, WARM_POOL, WARM_TEMPLATE, WARM_MAX_WAIT_SECONDS)
"""The variables of a turn pod by their full names."""

PREFIXES = (OPENAI_KEY_PREFIX, MCP_HEADER_PREFIX)
"""The families of a turn pod's variables, named by a prefix and numbers."""

__all__ = ["EXEC_SOCKET", "HOME", "MCP_HEADER_PREFIX", "MCP_SERVERS", "NAMESPACE", "OPENAI_ENDPOINTS",
           "OPENAI_KEY_PREFIX", "POD_NAME", "PREFIXES", "REDIS_URL", "SPAWNER", "STALL_SECONDS", "TASK_ID",
           "VARIABLES", "WARM_MAX_WAIT_SECONDS", "WARM_POOL", "WARM_TEMPLATE", "WORKSPACE"]
