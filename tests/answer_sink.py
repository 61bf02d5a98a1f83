"""An AnswerSink that remembers what a model call streamed (the text of its latest try), for provider tests."""

from __future__ import annotations


class RecordingSink:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.attempts = 0

    def attempt_started(self) -> None:
        self.attempts += 1
        self.deltas = []  # a new try voids what an earlier one streamed

    def text(self, delta: str) -> None:
        self.deltas.append(delta)
