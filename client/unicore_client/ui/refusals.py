"""What a web UI backend refuses, as the server answers it: ``BadRequest`` (400, the request is wrong) and each
``BackendRefusal`` with an HTTP status and a one-line message (``unicore_client.ui.backend_protocol`` re-exports them).
A module of its own, importing nothing of the UI, so that both backends and the protocol can use them without an import
cycle."""

from __future__ import annotations


class BadRequest(ValueError):
    """A request the UI refuses with 400: the request itself is wrong (the message is shown to the user)."""


class BackendRefusal(Exception):
    """A request the backend's source refused; the server answers ``status`` with the one-line message."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = " ".join(message.split())  # one line, whatever the API server wrote


class Forbidden(BackendRefusal):
    """The user may not do this (the Kubernetes API server's or task API's 403, its reason in the message)."""

    status = 403


class NotFound(BackendRefusal):
    """What was asked for does not exist (a conversation; a task is ``unicore.errors.TaskNotFound``)."""

    status = 404


class Conflict(BackendRefusal):
    """The request does not fit the state (a post to a closed conversation)."""

    status = 409


class NotSupported(BackendRefusal):
    """This backend does not do this (yet): the message says what to use instead."""

    status = 501


class Unavailable(BackendRefusal):
    """The source cannot answer now (API server or task API unreachable); the page may retry."""

    status = 503


__all__ = ["BackendRefusal", "BadRequest", "Conflict", "Forbidden", "NotFound", "NotSupported", "Unavailable"]
