"""Turn numbers as users see them, and as Redis stores them: the one place that converts between the two.

Users count a task's turns from 1: the first turn runs as Job ``<task>-t1``, and the same number is what the
AgentTask's ``status.lastTurn.number``, its Events, the task API's transcript (``turn`` of messages, ``number``
of turns, the ``turn=N`` query), ``kubectl agenttask logs --turn N`` and the runtime's log lines show. Redis keeps
the turn's index in the task's turn list (``turn_number`` of turn headers and messages, the ``<n>:`` prefix of
``uc:{T}:turnmeta`` fields), counted from 0. Everything shown to a user goes through :func:`shown_turn`; a number a
user gives goes through :func:`stored_turn` before it meets Redis.
"""

from __future__ import annotations

FIRST_SHOWN_TURN = 1


def shown_turn(stored: int) -> int:
    """The number users see for the turn Redis stores as ``stored`` (0 -> 1)."""
    return stored + FIRST_SHOWN_TURN


def stored_turn(shown: int) -> int:
    """The ``turn_number`` Redis stores for the turn users call ``shown`` (1 -> 0)."""
    return shown - FIRST_SHOWN_TURN
