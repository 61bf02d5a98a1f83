"""UniCore agent runtime: Redis-backed conversations, one agent turn per process."""

__version__ = "0.1.0"
