"""The plugin's one error type: a message for the user and an exit code."""

from __future__ import annotations


class PluginError(Exception):
    """Printed as ``error: <message>`` on stderr; the process exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Forbidden(PluginError):
    pass


class NotFound(PluginError):
    pass


class Unreachable(PluginError):
    pass
