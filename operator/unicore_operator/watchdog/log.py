"""The watchdog's logger: ``unicore.operator.watchdog`` in the project's one logger tree."""

from __future__ import annotations

import logging

logger = logging.getLogger("unicore.operator.watchdog")
