"""``unicore ui [--port P] [--open] [--scripts DIR]``: the local web UI (``unicore_client.ui.server``) on 127.0.0.1,
until
interrupted; ``--scripts``: the only directory the UI's ``scripted:NAME`` reads (``unicore_client.ui.scripts``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from unicore_client.arguments import int_between


def cmd_ui(args: argparse.Namespace) -> int:
    from unicore.launch.embedded_redis import redis_url
    from unicore.store.tasks import connect

    from unicore_client.ui.local_backend import LocalBackend
    from unicore_client.ui.server import UIServer

    url = redis_url()
    client = connect(url)
    client.ping()  # an unreachable Redis fails here (after the retry window), not in every request
    server = UIServer(LocalBackend(client, url, scripts=args.scripts), port=args.port)
    print(f"UniCore UI: {server.url}", flush=True)
    print("(the token in the URL is this run's password; Ctrl-C stops the server)", file=sys.stderr, flush=True)
    server.run(open_browser=args.open)
    return 0


def _directory(text: str) -> Path:
    """An argparse ``type``: an existing directory."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a directory: {text!r}")
    return path.resolve()


def add_ui_command(sub: Any) -> None:
    ui = sub.add_parser("ui", help="serve the web UI on 127.0.0.1 (prints its URL with a per-run token)")
    ui.add_argument("--port", type=int_between(0, 65535), default=8765, help="TCP port (0: any free one; default 8765)")
    ui.add_argument("--open", action="store_true", help="open the URL in the default browser")
    ui.add_argument("--scripts", type=_directory, metavar="DIR",
                    help="the directory whose files the UI's model scripted:NAME may name (default: none; the UI "
                         "reads no script file)")
    ui.set_defaults(func=cmd_ui)


__all__ = ["add_ui_command"]
