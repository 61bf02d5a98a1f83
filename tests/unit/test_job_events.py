"""FailedCreate Events of turn Jobs (issue 10 #19, pure parts) and the retry budget's setting."""

from __future__ import annotations

import pytest
from unicore.errors import ConfigError
from unicore_operator.job_events import FIELD_SELECTOR, failed_create
from unicore_operator.settings import load_settings


def event(**fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "metadata": {"namespace": "team", "name": "demo-t1.1800"},
        "involvedObject": {"kind": "Job", "namespace": "team", "name": "demo-t1", "apiVersion": "batch/v1"},
        "reason": "FailedCreate", "type": "Warning", "firstTimestamp": "2026-01-01T00:00:00Z",
        "message": 'Error creating: pods "demo-t1-x" is forbidden: exceeded quota: no-pods, requested: pods=1',
    }
    body.update(fields)
    return body


def test_a_failed_create_event_names_the_job_and_quotes_the_reason() -> None:
    namespace, job, message, first_seen = failed_create(event()) or ("", "", "", None)
    assert (namespace, job) == ("team", "demo-t1")
    assert message == 'FailedCreate: Error creating: pods "demo-t1-x" is forbidden: exceeded quota: no-pods, ' \
                      "requested: pods=1"
    assert first_seen == 1767225600.0


def test_other_events_are_not_failed_creates() -> None:
    assert failed_create(event(reason="SuccessfulCreate")) is None
    assert failed_create(event(involvedObject={"kind": "Pod", "name": "demo-t1-x"})) is None
    assert "involvedObject.kind=Job" in FIELD_SELECTOR and "reason=FailedCreate" in FIELD_SELECTOR


def test_the_retry_budget_is_a_positive_number_of_seconds() -> None:
    assert load_settings({"REDIS_URL": "redis://r"}).pod_create_retry_seconds == 60
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_POD_CREATE_RETRY_SECONDS": "5"}
                         ).pod_create_retry_seconds == 5
    with pytest.raises(ConfigError, match="UNICORE_POD_CREATE_RETRY_SECONDS"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_POD_CREATE_RETRY_SECONDS": "0"})
