"""Kopf handlers, one module per concern; importing this package registers them all."""

from unicore_operator import indexes  # noqa: F401  (registers the indexes)
from unicore_operator.handlers import (  # noqa: F401
    agents,
    agenttasks,
    command_jobs,
    jobs,
    lifecycle,
    schedules,
    warm_pools,
)
