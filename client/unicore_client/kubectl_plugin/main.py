"""``kubectl agenttask`` (console script ``kubectl-agenttask``): tree, send, logs, approve, deny, suspend, resume,
describe, ui, conv."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import IO

from unicore.api.turn_numbers import FIRST_SHOWN_TURN
from unicore.terminal import printable

from unicore_client.kubectl_plugin import approval_commands as approvals
from unicore_client.kubectl_plugin import commands
from unicore_client.kubectl_plugin import conversation_commands as conversations
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import connect
from unicore_client.kubectl_plugin.proxy import DEFAULT_TIMEOUT_SECONDS
from unicore_client.kubectl_plugin.ui_command import add_ui_parser

EPILOG = """examples:
  kubectl agenttask tree -n demo              the task tree (add -w to refresh, -A for all namespaces)
  kubectl agenttask send demo "and now in French?"
  kubectl agenttask logs demo --follow        the transcript and live answers, until the task is Idle
  kubectl agenttask approve demo              let the tool call that waits for approval run (or: deny)
  kubectl agenttask describe demo
  kubectl agenttask ui -n demo                the web UI on 127.0.0.1, with your rights (prints its URL)
  kubectl agenttask conv create room --task writer --task critic
  kubectl agenttask conv post room "@writer a tagline, please"
  kubectl agenttask conv show room --follow   the posts, then new ones as they come, until it is closed
"""


def _turn_number(text: str) -> int:
    """``--turn N``: a turn as users count them, from 1 (the Job ``<task>-tN``, ``status.lastTurn.number``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a turn number") from None
    if value < FIRST_SHOWN_TURN:
        raise argparse.ArgumentTypeError(f"turns are numbered from {FIRST_SHOWN_TURN} (turn N runs as Job NAME-tN)")
    return value


def _common() -> argparse.ArgumentParser:
    """Connection flags, accepted before or after the subcommand (kubectl style)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection")
    group.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="path to the kubeconfig file")
    group.add_argument("--context", default=argparse.SUPPRESS, help="the kubeconfig context to use")
    group.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="the tasks' namespace")
    group.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="kubectl agenttask",
        parents=[common],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Inspect and talk to UniCore AgentTasks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    tree = sub.add_parser("tree", parents=[common], help="show the task tree")
    tree.add_argument("name", nargs="?", help="show only this task and its descendants")
    tree.add_argument("-A", "--all-namespaces", action="store_true", help="tasks of every namespace")
    tree.add_argument("--no-utf8", action="store_true", help="ASCII instead of box-drawing characters")
    tree.add_argument("-w", "--watch", action="store_true", help="refresh in place until Ctrl-C")
    tree.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes with -w")
    tree.set_defaults(func=commands.cmd_tree)

    send = sub.add_parser("send", parents=[common], help="queue a follow-up message (exactly once)")
    send.add_argument("name")
    send.add_argument("text", nargs="*", help="the message (or use -f)")
    send.add_argument("-f", "--file", help="read the message from FILE ('-' = stdin)")
    send.add_argument("--id", help="message id (default: a new UUID); sending an id again is a no-op")
    send.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds to keep retrying while the operator is unreachable",
    )
    send.set_defaults(func=commands.cmd_send)

    logs = sub.add_parser("logs", parents=[common], help="print the transcript, turn by turn")
    logs.add_argument("name")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing, the model's answers as they are written, until the task is Idle")
    logs.add_argument("--tools", action="store_true", help="show tool inputs and results")
    logs.add_argument("--turn", type=_turn_number, metavar="N",
                      help="only turn N (numbered from 1: turn N runs as Job NAME-tN)")
    logs.add_argument("--page-size", type=int, default=200, help="messages per request (max 1000)")
    logs.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls with --follow")
    logs.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds to keep retrying while the operator is unreachable",
    )
    logs.set_defaults(func=commands.cmd_logs)

    approvals.add_parsers(sub, common, DEFAULT_TIMEOUT_SECONDS)

    for verb, func, text in (
        ("suspend", commands.cmd_suspend, "stop the active turn; start no new ones"),
        ("resume", commands.cmd_resume, "run again, with whatever was queued"),
    ):
        cmd = sub.add_parser(verb, parents=[common], help=text)
        cmd.add_argument("name")
        cmd.set_defaults(func=func)

    describe = sub.add_parser("describe", parents=[common], help="spec, status, children and recent events")
    describe.add_argument("name")
    describe.set_defaults(func=commands.cmd_describe)

    add_ui_parser(sub, common)
    conversations.add_parser(sub, common)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    takes_words = args.command == "send" or (args.command == "conv" and args.conv_command == "post")
    if extra and takes_words and not any(word.startswith("-") for word in extra):
        args.text = [*args.text, *extra]  # `send NAME --id X words...`: words after an option
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "ui" and args.all_namespaces and getattr(args, "namespace", None):
        parser.error("give -n NAMESPACE or --all-namespaces, not both")
    if args.command == "conv" and (problem := conversations.check(args)):
        parser.error(problem)
    return args


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "verbose", False):
        logging.getLogger("unicore").setLevel(logging.DEBUG)
    try:
        kube = connect(
            kubeconfig=getattr(args, "kubeconfig", None),
            context=getattr(args, "context", None),
            namespace=getattr(args, "namespace", None),
        )
        return int(args.func(args, kube, out))
    except PluginError as exc:
        err.write(f"error: {printable(exc.message, multiline=False)}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
