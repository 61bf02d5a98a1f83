"""``kubectl agenttask ui [--port P] [--open] [-n NS | -A]``: the web UI of ``unicore ui`` (same page, same HTTP
server: per-run token, CSRF, CSP, 127.0.0.1 only) over ``ClusterBackend``: everything it shows or does goes to the
API server with the user's own kubeconfig, so the page shows what the user's RBAC allows."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

from unicore_client.arguments import int_between
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import KubeContext

DEFAULT_PORT = 8766  # beside `unicore ui`'s 8765


def cmd_ui(args: argparse.Namespace, kube: KubeContext, out: IO[str]) -> int:
    from unicore_client.ui.backend_protocol import BackendRefusal
    from unicore_client.ui.cluster_backend import ClusterBackend
    from unicore_client.ui.server import UIServer

    backend = ClusterBackend(kube, None if args.all_namespaces else kube.namespace)
    try:
        backend.start()  # the first list: a missing right is one line here, before anything is served
    except BackendRefusal as exc:
        raise PluginError(exc.message) from None
    try:
        server = UIServer(backend, port=args.port)
    except OSError as exc:
        backend.close()
        raise PluginError(f"cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc} (try --port 0)") from None
    where = "every namespace you may list" if args.all_namespaces else f"namespace {kube.namespace}"
    out.write(f"UniCore UI: {server.url}\n")
    out.flush()
    print(f"(the agent tasks of {where}, as {kube.user or 'your kubeconfig user'}; the token in the URL is this "
          "run's password; Ctrl-C stops the server)", file=sys.stderr, flush=True)
    try:
        server.run(open_browser=args.open)
    finally:
        backend.close()
    return 0


def add_ui_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    ui = sub.add_parser("ui", parents=[common],
                        help="serve the web UI on 127.0.0.1 with your kubeconfig's rights (prints its URL)")
    ui.add_argument("--port", type=int_between(0, 65535), default=DEFAULT_PORT,
                    help=f"TCP port on 127.0.0.1 (0: any free one; default {DEFAULT_PORT})")
    ui.add_argument("--open", action="store_true", help="open the URL in the default browser")
    ui.add_argument("-A", "--all-namespaces", action="store_true",
                    help="the tasks of every namespace you may list (needs list/watch agenttasks cluster-wide)")
    ui.set_defaults(func=cmd_ui)


__all__ = ["add_ui_parser", "cmd_ui"]
