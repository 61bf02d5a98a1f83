"""The package's one named logger."""

from __future__ import annotations

import logging

logger = logging.getLogger("unicore.devcluster")
