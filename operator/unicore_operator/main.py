"""``unicore-operator``: run the Kopf operator (standalone, no peering) with the settings from the environment."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import kopf
from unicore.errors import ConfigError

from unicore_operator.settings import load_settings


def import_handlers() -> None:
    """Build the operator (``composition.compose``)."""
    from unicore_operator.composition import compose

    compose()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="unicore-operator", description=__doc__)
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument("--liveness", default=None,
                        help="Kopf's own liveness endpoint, e.g. http://0.0.0.0:8081/healthz (default: none; "
                             "the operator's HTTP server serves /healthz)")
    return parser.parse_args(argv)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(verbose: bool = False) -> logging.Handler:
    """The operator's one log handler: the root logger gets exactly one stderr handler with one format, and every
    logger (ours, Kopf's, the libraries') writes through it, so each record is printed once. Neither
    ``logging.basicConfig`` nor ``kopf.configure`` is called: each adds a root handler of its own, and together they
    printed every line twice in two formats. Calling this again replaces the handler rather than adding one."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # Kopf's own chatter (every watch event, every patch) only when asked for; its warnings and errors always.
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else logging.WARNING)
    # asyncio's debug notes are noise even with --verbose (kopf.configure silences them too); its errors
    # ("Task exception was never retrieved") still reach the log.
    logging.getLogger("asyncio").setLevel(logging.WARNING)
    return handler


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.verbose)
    try:
        settings = load_settings()  # fail fast with a clear message; the startup handler reads it again
    except ConfigError as exc:
        print(f"unicore-operator: {exc}", file=sys.stderr)
        return 2
    from unicore_operator.admission import webhook_problem
    from unicore_operator.redis_identities import identity_problem
    from unicore_operator.task_api.server import task_api_problem

    # per-namespace Redis identities need ACL rights, the task API and the webhook the request-header CA: say so in
    # one line
    for check in (identity_problem, task_api_problem, webhook_problem):
        problem = check(settings)
        if problem:
            print(f"unicore-operator: {problem}", file=sys.stderr)
            return 2
    import_handlers()
    try:
        asyncio.run(kopf.operator(
            standalone=True,
            clusterwide=settings.cluster_wide,
            namespaces=list(settings.namespaces),
            liveness_endpoint=args.liveness,
        ))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
