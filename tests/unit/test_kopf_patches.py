"""Kopf's index pre-fill: dropping a toggle that is gone wakes nobody (kopf_patches), so n objects waiting at
start-up cost n wake-ups per real change, not n per object (n^2)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kopf._cogs.aiokits.aiotoggles import ToggleSet
from unicore_operator import kopf_patches

WAITERS = 200


def checks_while_dropping_again() -> int:
    """How often the set's state is computed while WAITERS workers wait and each drops the gone toggle again."""
    checks = 0

    def all_on(states: Iterable[bool]) -> bool:
        nonlocal checks
        checks += 1
        return all(states)

    async def scenario() -> None:
        toggles = ToggleSet(all_on)
        listed = await toggles.make_toggle(False, name="agenttasks listed")
        other = await toggles.make_toggle(False, name="jobs listed")
        waiters = [asyncio.create_task(toggles.wait_for(True)) for _ in range(WAITERS)]
        await asyncio.sleep(0)  # all of them waiting
        for _ in range(WAITERS):  # what each object's worker does: drop its kind's toggle, gone after the first
            await toggles.drop_toggle(listed)
            await asyncio.sleep(0)
        await toggles.drop_toggle(other)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)

    asyncio.run(scenario())
    return checks


def test_dropping_a_gone_toggle_wakes_no_waiter() -> None:
    kopf_patches.apply()
    kopf_patches.apply()  # once is enough; twice changes nothing
    checks = checks_while_dropping_again()
    assert WAITERS <= checks <= 4 * WAITERS, checks  # a few wake-ups per waiter, not one per drop
