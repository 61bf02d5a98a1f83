"""``unicore gc [--ttl S] [--archive URL] [--dry-run]``: one retention pass (``unicore.retention.Retention``) over
local mode's trees: those idle longer than the TTL are archived (when an archive is given) and removed from Redis;
then the same over local mode's shared conversations (``unicore.conversation_retention``).

Without options it reads local mode's retention variables (``RetentionSettings``); on Kubernetes the operator runs
the same pass on its own schedule with its own settings.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, ClassVar

from pydantic import Field, field_validator
from unicore.archive import check_archive_url, sink_for
from unicore.conversation_retention import ConversationRetention
from unicore.launch.embedded_redis import redis_url
from unicore.retention import Retention
from unicore.settings import EnvSettings
from unicore.store import conversation_retention as conversation_state
from unicore.store import retention as state
from unicore.store.client import RedisClient
from unicore.store.tasks import connect

from unicore_client.arguments import UsageError


class RetentionSettings(EnvSettings):
    """Local mode's retention variables (the operator has the same two in its own settings)."""

    what: ClassVar[str] = "retention settings"

    ttl_seconds: float = Field(0.0, ge=0, allow_inf_nan=False, validation_alias="UNICORE_RETENTION_TTL_SECONDS")
    archive_url: str | None = Field(None, validation_alias="UNICORE_RETENTION_ARCHIVE_URL")

    @field_validator("archive_url", mode="before")
    @classmethod
    def _url(cls, value: object) -> object:
        if isinstance(value, str):
            return check_archive_url(value) if value.strip() else None
        return value


def add_gc_command(sub: Any) -> None:
    """``unicore gc``: one retention pass over local mode's trees."""
    gc = sub.add_parser("gc", help="archive and remove task trees and conversations idle longer than the retention "
                                   "TTL")
    gc.add_argument("--ttl", type=_seconds, help="idle seconds (default: $UNICORE_RETENTION_TTL_SECONDS)")
    gc.add_argument("--archive", type=_url, help="file:///path or s3://bucket/prefix "
                                                 "(default: $UNICORE_RETENTION_ARCHIVE_URL; none: not archived)")
    gc.add_argument("--dry-run", action="store_true", help="say which trees and conversations would go; change "
                                                           "nothing")
    gc.set_defaults(func=cmd_gc)


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive number of seconds")
    return number


def _url(value: str) -> str:
    try:
        return check_archive_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_gc(args: argparse.Namespace) -> int:
    settings = RetentionSettings.from_env()
    ttl = args.ttl if args.ttl is not None else settings.ttl_seconds
    if not ttl:
        raise UsageError("retention is off: give --ttl SECONDS or set UNICORE_RETENTION_TTL_SECONDS")
    url = args.archive or settings.archive_url
    client = connect(redis_url())
    roots = state.local_roots(client)
    if args.dry_run:
        now = time.time()
        for root in state.roots_idle_since(client, roots, now - ttl):
            tree = state.read_tree(client, root)
            reason = tree.not_removable(now=now, ttl=ttl) if tree else "no record"
            print(f"{root}: {'kept: ' + reason if reason else 'would be removed'}")
        conversations = ConversationRetention(client, ttl)
        for name in conversations.candidates(_local_conversations(client))[0]:
            reason = conversations.reason_kept(name)
            print(f"conversation {name}: {'kept: ' + reason if reason else 'would be removed'}")
        return 0
    sink = sink_for(url) if url else None
    failed = [_say(o.root, o.action, o.reason, o.url, f"removed {len(o.tasks)} task(s)")
              for o in Retention(client, ttl, sink).run(roots)]
    failed += [_say(f"conversation {o.conversation}", o.action, o.reason, o.url, f"removed ({o.posts} posts)")
               for o in ConversationRetention(client, ttl, sink).run(_local_conversations(client))]
    return 1 if any(failed) else 0


def _local_conversations(client: RedisClient) -> list[str]:
    """Local mode's conversations (a bare name; ``<namespace>/<name>`` ones are a cluster's)."""
    return [name for name in conversation_state.conversation_ids(client) if "/" not in name]


def _say(what: str, action: str, reason: str, url: str, removed: str) -> bool:
    """Print one outcome of the pass (a tree's or a conversation's); True when its archive failed (exit 1)."""
    if action == "removed":
        print(f"{what}: {removed}, {f'archived to {url}' if url else 'not archived'}")
    elif action == "archive-failed":
        print(f"{what}: kept: {reason}", file=sys.stderr)
        return True
    elif action == "changed":
        print(f"{what}: kept: {reason}")
    return False


__all__ = ["RetentionSettings", "add_gc_command", "cmd_gc"]
