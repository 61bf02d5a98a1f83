"""Kopf's index pre-fill: making or dropping a toggle wakes the waiting workers only when the set's state changes
(kopf_patches), so n objects listed at start-up cost a few wake-ups each, not n each (n^2)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kopf._cogs.aiokits.aiotoggles import ToggleSet
from unicore_operator import kopf_patches

OBJECTS = 200


def checks_during_a_pre_fill() -> int:
    """How often the set's state is computed while OBJECTS workers wait, as Kopf's pre-fill goes: each listed
    object makes its toggle and then its worker waits; each stores its index entries, drops its own toggle and its
    kind's (gone after the first time); at the end the kind's listing is done."""
    checks = 0

    def all_on(states: Iterable[bool]) -> bool:
        nonlocal checks
        checks += 1
        return all(states)

    async def scenario() -> None:
        toggles = ToggleSet(all_on)
        listing = await toggles.make_toggle(False, name="the kind's listing")
        own = []
        waiters = []
        for i in range(OBJECTS):
            own.append(await toggles.make_toggle(False, name=f"object {i}"))
            waiters.append(asyncio.create_task(toggles.wait_for(True)))
            await asyncio.sleep(0)  # it waits
        for toggle in own:
            await toggles.drop_toggle(toggle)
            await toggles.drop_toggle(listing)
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)

    asyncio.run(scenario())
    return checks


def test_a_pre_fill_wakes_each_waiter_a_few_times_not_once_per_object() -> None:
    kopf_patches.apply()
    kopf_patches.apply()  # once is enough; twice changes nothing
    checks = checks_during_a_pre_fill()
    assert OBJECTS <= checks <= 10 * OBJECTS, checks
