"""One fix to Kopf's internals, applied by the composition root before Kopf starts.

Kopf holds every object's handlers until its indexes are filled: each object's worker drops its resource kind's
"indexed" toggle (again and again: the toggle is gone after the first time) and waits for the operator-wide toggle
set to be on. Every drop notifies every waiting worker, even when it removed nothing, and each of them re-checks the
set: with n objects listed at start-up that is n^2 wake-ups. An operator starting with 5,000 AgentTasks and 5,000
turn Jobs spent over 13 minutes of CPU there before its first handler ran (1,000 + 1,000: seconds). Here a drop
notifies only when it removed a toggle, which is the only time the set's state can change.
"""

from __future__ import annotations

from kopf._cogs.aiokits.aiotoggles import Toggle, ToggleSet

_PATCHED = "__unicore_notifies_only_on_change__"


async def drop_toggle(self: ToggleSet, toggle: Toggle) -> None:
    """``ToggleSet.drop_toggle`` that wakes the waiters only when ``toggle`` was in the set."""
    async with self._condition:
        if toggle in self._toggles:
            self._toggles.discard(toggle)
            self._condition.notify_all()


def apply() -> None:
    """Install the fix (calling it again changes nothing)."""
    if getattr(ToggleSet.drop_toggle, _PATCHED, False):
        return
    setattr(drop_toggle, _PATCHED, True)
    ToggleSet.drop_toggle = drop_toggle  # type: ignore[method-assign]
