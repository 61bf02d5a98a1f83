"""``unicore-operator``: run the Kopf operator (standalone, no peering) with the settings from the environment."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys

import kopf
from unicore.errors import ConfigError

from unicore_operator.log import logger
from unicore_operator.settings import load_settings

# Later modules (issues 5 and 6) register their handlers, startup hooks and HTTP routes when imported.
OPTIONAL_MODULES = ("unicore_operator.watchdog.adapter", "unicore_operator.metrics", "unicore_operator.task_api")


def import_handlers() -> None:
    importlib.import_module("unicore_operator.handlers")
    for module in OPTIONAL_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
            logger.debug("optional module %s not present", module)
    # Modules with an install() hook their routes and startup hooks in only now, once everything is loaded (doing it
    # at import time would break on the reconcile -> metrics import inside the handlers package).
    for module in OPTIONAL_MODULES:
        install = getattr(sys.modules.get(module), "install", None)
        if callable(install):
            install()


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
