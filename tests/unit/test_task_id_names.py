"""Task ids are what Kubernetes accepts as names: ``[<namespace>/]<name>``, the name a DNS-1123 subdomain."""

from __future__ import annotations

import pytest
from unicore.api.schema import validate_task_id


@pytest.mark.parametrize("task_id", ["demo", "ns/demo", "ns/a.b", "ns/a-1.b-2.c", "a1/b2", "x"])
def test_kubernetes_names_are_task_ids(task_id: str) -> None:
    assert validate_task_id(task_id) == task_id


@pytest.mark.parametrize("task_id", ["ns/a..b", "a..b", "ns/a.", "ns/.a", "ns/a.-b", "ns/a-.b", "ns/A", "ns/a_b",
                                     "n.s/a", "/a", "ns/", "", "demo\n", "ns/demo\n"])
def test_other_strings_are_refused_with_one_line(task_id: str) -> None:
    with pytest.raises(ValueError, match="invalid task id") as caught:
        validate_task_id(task_id)
    assert "\n" not in str(caught.value)
