"""Which turn the operator's next Job runs (TaskSnapshot.next_turn): it names the Job and counts its failures."""

from __future__ import annotations

from unicore.store.operator_state import LastTurn, TaskSnapshot


def snapshot(status: str, ended_at: float | None, *, lease_held: bool = False) -> TaskSnapshot:
    return TaskSnapshot(exists=True, record={"status": status}, turns=2, lease_held=lease_held,
                        last_turn=LastTurn(number=1, started_at=1.0, ended_at=ended_at))


def test_a_turn_that_died_before_its_end_is_continued_under_its_own_number() -> None:
    assert snapshot("running", None).next_turn() == 2


def test_a_turn_that_died_after_its_end_but_before_letting_go_of_the_lease_is_done() -> None:
    # the record still says running (a kill "after end turn" or "after notify"): the next Job runs turn 3, as the
    # turn runtime does, not a retry of turn 2 (its failures would count against the wrong turn)
    assert snapshot("running", 2.0).next_turn() == 3


def test_an_idle_task_and_a_running_turn_get_the_next_number() -> None:
    assert snapshot("idle", 2.0).next_turn() == 3
    assert snapshot("running", None, lease_held=True).next_turn() == 3
    assert TaskSnapshot(exists=True, record={}).next_turn() == 1
