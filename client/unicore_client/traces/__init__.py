"""Where UniCore's traces go on a person's machine and in the tests: a real Jaeger (v2, the one ``jaeger`` binary of
hack/build-jaeger.sh) with an in-memory store, its OTLP/HTTP receiver for the turns' spans and its query API.

* ``jaeger``: ``JaegerServer`` (start, wait until ready, read traces back, stop) and ``find_jaeger_binary``.
* ``unicore traces up|down|url`` (``unicore_client.local.traces_command``) runs one detached for local mode.
"""

from __future__ import annotations

from unicore_client.traces.jaeger import (
    JaegerError,
    JaegerNotFound,
    JaegerServer,
    find_jaeger_binary,
    jaeger_config,
    render_config,
)

__all__ = ["JaegerError", "JaegerNotFound", "JaegerServer", "find_jaeger_binary", "jaeger_config", "render_config"]
