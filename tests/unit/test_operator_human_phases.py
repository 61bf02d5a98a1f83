"""Tasks waiting for people (issue 15): the phases WaitingForApproval and WaitingForInput, their status and precedence,
the approval timeout's choice of limit, and the plugin's rendering of waiting calls (pure)."""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import pytest
from unicore.api.spec import AgentTaskSpec, task_spec_of
from unicore.store.approvals import PendingCall
from unicore.store.operator_state import TaskSnapshot
from unicore_client.kubectl_plugin import main as cli
from unicore_client.kubectl_plugin.approval_commands import render_approvals, request_body
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.tree_view import render_tree
from unicore_operator import approval_waits as approvals
from unicore_operator.phases import (
    HumanWait,
    Phase,
    TaskObservation,
    build_status,
    decide_phase,
    status_changed,
    wants_turn_job,
)

APPROVE = HumanWait(kind="approval", call_id="toolu_1", tool="write_file", calls=1, since=1795320000.0)
ASK = HumanWait(kind="input", call_id="toolu_2", tool="ask_user", question="Which file?", since=1795320000.0)
NOW = "2026-11-23T04:00:00Z"


def test_a_task_waiting_for_a_person_starts_no_job_and_says_what_it_waits_for() -> None:
    phase, message = decide_phase(TaskObservation(human=APPROVE))
    assert phase is Phase.WAITING_FOR_APPROVAL
    assert message == "waiting for approval of tool write_file (call toolu_1): kubectl agenttask approve/deny"
    assert not wants_turn_job(TaskObservation(human=APPROVE))
    phase, message = decide_phase(TaskObservation(human=ASK))
    assert phase is Phase.WAITING_FOR_INPUT and message.endswith("to: Which file?")
    assert not wants_turn_job(TaskObservation(human=ASK))
    several = HumanWait(kind="approval", call_id="a", tool="write_file", calls=3)
    assert "and 2 more call(s)" in decide_phase(TaskObservation(human=several, held_messages=2))[1]
    assert decide_phase(TaskObservation(human=several, held_messages=2))[1].endswith("2 message(s) queued until then")
    unreadable = HumanWait(kind="approval", calls=0)
    assert "approval of a tool call:" in decide_phase(TaskObservation(human=unreadable))[1]


def test_precedence_of_the_waits_for_people() -> None:
    # a turn that runs, or queued work that wakes the task, comes first: the task waits for its turn then
    assert decide_phase(TaskObservation(human=APPROVE, active_job="j"))[0] is Phase.RUNNING
    assert decide_phase(TaskObservation(human=APPROVE, lease_held=True))[0] is Phase.RUNNING
    assert decide_phase(TaskObservation(human=APPROVE, pending_messages=1))[0] is Phase.PENDING
    assert wants_turn_job(TaskObservation(human=APPROVE, pending_messages=1))  # the decision's wake-up
    assert decide_phase(TaskObservation(human=ASK, unfinished_turn=True))[0] is Phase.PENDING
    # suspended and failed come before the wait
    assert decide_phase(TaskObservation(human=APPROVE, suspended=True))[0] is Phase.SUSPENDED
    assert decide_phase(TaskObservation(human=APPROVE, invalid_reason="bad"))[0] is Phase.FAILED
    # the wait comes before the children's work; held messages (they do not wake it) change nothing
    working = {"child": "Running"}
    assert decide_phase(TaskObservation(human=APPROVE, children_phases=working))[0] is Phase.WAITING_FOR_APPROVAL
    assert decide_phase(TaskObservation(human=ASK, children_phases=working, held_messages=4))[0] is (
        Phase.WAITING_FOR_INPUT)
    assert not wants_turn_job(TaskObservation(human=ASK, held_messages=4))


def test_the_status_names_the_call_and_drops_it_once_decided() -> None:
    phase, message = decide_phase(TaskObservation(human=APPROVE))
    waiting = build_status(phase=phase, message=message, record=None, last_turn=None, active_job=None, children=[],
                           depth=0, tree_path="demo", failed_attempts=0, generation=3, previous=None, now=NOW,
                           human=APPROVE)
    assert waiting["phase"] == "WaitingForApproval"
    assert waiting["waitingFor"] == {"kind": "approval", "callId": "toolu_1", "tool": "write_file", "calls": 1,
                                     "since": "2026-11-22T04:00:00Z"}
    (ready,) = waiting["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForApproval")
    assert "write_file" in ready["message"]
    # the next status (the task runs again) removes waitingFor: null in the merge patch, only when it was there
    running = build_status(phase=Phase.RUNNING, message="turn Job demo-t2 is running", record=None, last_turn=None,
                           active_job="demo-t2", children=[], depth=0, tree_path="demo", failed_attempts=0,
                           generation=3, previous=waiting, now=NOW, human=APPROVE)
    assert running["waitingFor"] is None and status_changed(waiting, running)
    again = build_status(phase=Phase.RUNNING, message="turn Job demo-t2 is running", record=None, last_turn=None,
                         active_job="demo-t2", children=[], depth=0, tree_path="demo", failed_attempts=0,
                         generation=3, previous={k: v for k, v in running.items() if k != "waitingFor"}, now=NOW)
    assert "waitingFor" not in again
    question = build_status(phase=Phase.WAITING_FOR_INPUT, message="m", record=None, last_turn=None, active_job=None,
                            children=[], depth=0, tree_path="demo", failed_attempts=0, generation=3, previous=None,
                            now=NOW, human=HumanWait(kind="input", call_id="q", question="x" * 5000))
    assert question["waitingFor"]["kind"] == "input" and len(question["waitingFor"]["question"]) <= 256
    assert question["conditions"][0]["reason"] == "WaitingForInput"


def _call(call_id: str, kind: str = "approval", at: float = 100.0, status: str = "pending") -> PendingCall:
    return PendingCall(call_id=call_id, tool="ask_user" if kind == "input" else "write_file", input={"path": "a"},
                       kind=kind, turn=1, requested_at=at, question="Why?" if kind == "input" else "",
                       status=status)  # type: ignore[arg-type]


def test_the_snapshot_becomes_the_wait_the_phases_see() -> None:
    assert approvals.human_wait(TaskSnapshot(exists=True)) is None
    snap = TaskSnapshot(exists=True, waiting_for="approval",
                        pending_calls=(_call("b", at=200.0), _call("a", at=150.0), _call("q", "input", at=10.0)))
    wait = approvals.human_wait(snap)
    assert wait == HumanWait(kind="approval", call_id="b", tool="write_file", calls=2, since=150.0)
    snap = TaskSnapshot(exists=True, waiting_for="input", pending_calls=(_call("q", "input"),))
    assert approvals.human_wait(snap) == HumanWait(kind="input", call_id="q", tool="ask_user", question="Why?",
                                                  calls=1, since=100.0)
    held = TaskSnapshot(exists=True, pending=3, waiting_for="approval", inbox_wakes=False)
    assert held.runnable_pending == 0
    assert TaskSnapshot(exists=True, pending=3, waiting_for="approval").runnable_pending == 3


def test_the_timeout_is_the_tasks_then_the_inherited_one_then_the_operators() -> None:
    inherited = {"approval": json.dumps({"tools": ["*"], "timeout_seconds": 90})}
    def spec(**fields: Any) -> AgentTaskSpec:
        return task_spec_of({"spec": fields})

    assert approvals.timeout_seconds(spec(approval={"tools": ["x"], "timeoutSeconds": 5}), inherited, 3600) == 5
    assert approvals.timeout_seconds(spec(), inherited, 3600) == 90  # a child without its own spec.approval
    assert approvals.timeout_seconds(spec(approval={"tools": ["x"]}), inherited, 3600) == 3600
    assert approvals.timeout_seconds(spec(), {"approval": "not json"}, 7) == 7
    calls = [_call("a", at=100.0), _call("b", at=50.0, status="approved"), _call("q", "input", at=1.0)]
    assert approvals.overdue_at(calls, 30) == 130.0  # the oldest pending approval; questions never expire
    assert approvals.overdue_at(calls, 0) is None
    assert approvals.overdue_at([_call("q", "input")], 30) is None


def _task(phase: str, waiting: dict[str, Any] | None, message: str = "", **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "message": message, "turns": 1, "tokens": 10}
    if waiting:
        status["waitingFor"] = waiting
    return {"metadata": {"name": "approval", "namespace": "demo", "creationTimestamp": "2026-11-23T03:00:00Z"},
            "spec": {"prompt": "p", **spec}, "status": status}


def test_tree_and_describe_show_the_waiting_call_escaped() -> None:
    now = datetime.datetime(2026, 11, 23, 4, 0, tzinfo=datetime.UTC)
    evil = "waiting for approval of tool write_file (call \x1b[31mX\x1b[0m): kubectl agenttask approve/deny"
    task = _task("WaitingForApproval", {"kind": "approval", "callId": "\x1b[31mX\x1b[0m", "tool": "write_file",
                                        "calls": 1, "since": "2026-11-23T03:59:00Z"}, evil,
                 approval={"tools": ["write_file"]})
    tree = render_tree([task], now, utf8=False, width=200)
    assert "WaitingForApproval" in tree and "\x1b" not in tree and "\\x1b[31mX" in tree and "write_file" in tree
    listed = {"pending": [{"callId": "X", "tool": "write_file", "input": '{"content": "\x07bell"}'}],
              "decided": [{"callId": "Y", "tool": "write_file", "decision": "denied", "status": "denied",
                           "decidedBy": "bob", "reason": "no\nway"}]}
    text = render_describe(task, [], [], now, render_approvals(listed, task["status"]["waitingFor"]))
    assert "\x1b" not in text and "\x07" not in text
    assert "Waiting For:" in text and "kubectl agenttask approve|deny approval" in text
    assert "WAITING   X  write_file" in text and "by bob: no way" in text
    unreachable = render_approvals("forbidden: carol cannot get agenttasks/approvals", {"callId": "X",
                                                                                       "tool": "write_file"})
    assert unreachable == ["Approvals:", "  waiting: call X (write_file)",
                           "  (cannot list approvals: forbidden: carol cannot get agenttasks/approvals)"]
    question = _task("WaitingForInput", {"kind": "input", "callId": "q", "question": "Which \x1b]0;file?"})
    asked = render_describe(question, [], [], now)
    assert "Question:" in asked and "\x1b" not in asked and "kubectl agenttask send approval TEXT" in asked


def test_approve_and_deny_arguments() -> None:
    args = cli.parse(["approve", "demo", "--call", "toolu_1", "--reason", "looks fine", "-n", "team"])
    assert (args.name, args.call, args.reason, args.namespace, args.decision) == (
        "demo", "toolu_1", "looks fine", "team", "approve")
    assert request_body(args) == {"decision": "approve", "reason": "looks fine", "callId": "toolu_1"}
    assert request_body(cli.parse(["deny", "demo"])) == {"decision": "deny", "reason": ""}
    args.call, args.reason = "", "x"
    with pytest.raises(PluginError, match="--call must be") as refused:  # the server's rules, also without argparse
        request_body(args)
    assert refused.value.exit_code == 2


@pytest.mark.parametrize(("argv", "needle"), [
    (["approve"], "the following arguments are required: name"),
    (["deny", "demo", "--call", ""], "argument --call: must be a tool call id"),
    (["deny", "demo", "--call", "a\x1bb"], "argument --call: must be a tool call id"),
    (["deny", "demo", "--reason", "x" * 5000], "argument --reason: is 5000 characters, over the cap of 4096"),
])
def test_bad_arguments_exit_2_before_anything_is_asked(argv: list[str], needle: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--kubeconfig", "/nonexistent", *argv], out=io.StringIO(), err=io.StringIO())
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and needle in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("kubectl agenttask")] == [err.splitlines()[-1]]


def test_approval_metrics_are_exported_at_zero_and_count_from_the_statuses() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from unicore_operator.metrics import REGISTRY, approval_decided
    from unicore_operator.metrics.catalog import APPROVAL_DECISIONS
    from unicore_operator.metrics.state_collector import task_families

    assert set(APPROVAL_DECISIONS) == set(approvals.DECISIONS)

    def scrape(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(
            generate_latest(registry).decode()) for s in fam.samples}

    before = scrape(REGISTRY)
    for decision in APPROVAL_DECISIONS:  # every decision from the start (0 until the first one)
        assert ("unicore_approvals_total", (("decision", decision),)) in before
    approval_decided("expired", 2)
    after = scrape(REGISTRY)
    key = ("unicore_approvals_total", (("decision", "expired"),))
    assert after[key] == before[key] + 2

    class Families:
        def __init__(self, tasks: list[dict[str, Any]]) -> None:
            self.tasks = tasks

        def collect(self):  # type: ignore[no-untyped-def]
            return iter(task_families(self.tasks, {}, max_trees=10))

    fresh = CollectorRegistry()
    fresh.register(Families([]))  # type: ignore[arg-type]
    assert scrape(fresh)[("unicore_approvals_pending", ())] == 0
    tasks = [_task("WaitingForApproval", {"kind": "approval", "callId": "a", "calls": 2}),
             _task("WaitingForApproval", {"kind": "approval", "callId": "b"}),
             _task("WaitingForInput", {"kind": "input", "callId": "q"}), _task("Idle", None)]
    counted = CollectorRegistry()
    counted.register(Families(tasks))  # type: ignore[arg-type]
    samples = scrape(counted)
    assert samples[("unicore_approvals_pending", ())] == 3
    assert samples[("unicore_tasks", (("namespace", "demo"), ("phase", "WaitingForApproval")))] == 2


def test_a_refused_decision_says_which_right_is_missing() -> None:
    from unicore_client.kubectl_plugin.proxy import forbidden_message

    status = ('agenttasks.tasks.unicore.dev "demo" is forbidden: User "carol" cannot create resource '
              '"agenttasks/approvals" in API group "tasks.unicore.dev" in the namespace "team-a"')
    assert forbidden_message(status, method="POST", path="/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/"
                             "agenttasks/demo/approvals") == (
        "forbidden: carol cannot create agenttasks/approvals (tasks.unicore.dev) in namespace team-a, so cannot "
        "approve or deny tool calls of its agent tasks (ask for the unicore-agenttask-messenger role there)")
