"""The operator's logger: one child of the project's logger tree."""

from __future__ import annotations

import logging

logger = logging.getLogger("unicore.operator")
