"""Retention on a real 3-master Redis Cluster (issue 15, item 4): the same tests as tests/integration/test_retention.py
(tree dumps, the journal, the per-task retire script, the purge, tombstones), re-collected with the cluster's
``redis_url`` and ``redis_client`` (tests/integration/test_redis_cluster.py's fixtures)."""

from __future__ import annotations

from tests.integration.test_redis_cluster import redis_client, redis_cluster, redis_url  # noqa: F401
from tests.integration.test_retention import (
    test_a_failed_archive_deletes_nothing_and_the_next_pass_retries as _failed_archive,
)
from tests.integration.test_retention import test_a_tree_that_changes_after_its_archive_is_kept_whole as _changed
from tests.integration.test_retention import test_an_active_tree_is_kept_whole as _active
from tests.integration.test_retention import test_an_idle_tree_past_its_ttl_is_archived_then_removed as _idle

test_an_idle_tree_is_archived_then_removed_on_the_cluster = _idle
test_an_active_tree_is_kept_whole_on_the_cluster = _active
test_a_failed_archive_deletes_nothing_on_the_cluster = _failed_archive
test_a_tree_that_changes_after_its_archive_is_kept_whole_on_the_cluster = _changed
