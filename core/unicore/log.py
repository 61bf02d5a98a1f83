"""The one named logger tree: everything logs under ``unicore``."""

from __future__ import annotations

import logging

from unicore.settings import RuntimeSettings

logger = logging.getLogger("unicore")


def get_logger(name: str) -> logging.Logger:
    """A child of the ``unicore`` logger, e.g. ``get_logger("turn")`` -> ``unicore.turn``."""
    return logger.getChild(name)


def configure(level: str | None = None) -> None:
    """Configure logging for a console entrypoint (level from ``UNICORE_LOG_LEVEL``, default INFO)."""
    chosen = (level or RuntimeSettings.from_env(only={"log_level"}).log_level or "INFO").upper()
    logging.basicConfig(
        level=chosen,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
