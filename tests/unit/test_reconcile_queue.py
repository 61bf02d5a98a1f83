"""The watch handlers' reconcile requests: one waiting request per task, a bounded number running, none lost."""

from __future__ import annotations

import asyncio

from unicore_operator.reconcile_queue import BURST, ReconcileQueue

Key = tuple[str, str]


def test_requests_of_a_waiting_task_are_one_reconcile_named_by_the_first() -> None:
    async def scenario() -> list[tuple[Key, str]]:
        queue, done = ReconcileQueue(), []

        async def reconcile(key: Key, reason: str) -> None:
            done.append((key, reason))

        for reason in ("job-running", "turn-pod-created", "child:a"):
            queue.request(("ns", "a"), reason)
        queue.request(("ns", "b"), "spec-changed")
        workers = queue.start(reconcile, 2)
        await asyncio.wait_for(queue.join(), 5)
        for worker in workers:
            worker.cancel()
        return done

    assert asyncio.run(scenario()) == [(("ns", "a"), "job-running"), (("ns", "b"), "spec-changed")]


def test_a_request_made_while_its_task_is_reconciled_runs_once_more() -> None:
    async def scenario() -> list[str]:
        queue, done = ReconcileQueue(), []
        started, release = asyncio.Event(), asyncio.Event()

        async def reconcile(key: Key, reason: str) -> None:
            done.append(reason)
            started.set()
            await release.wait()

        workers = queue.start(reconcile, 1)
        queue.request(("ns", "a"), "first")
        await asyncio.wait_for(started.wait(), 5)
        queue.request(("ns", "a"), "during")  # the change it reports may come after what the running one read
        release.set()
        await asyncio.wait_for(queue.join(), 5)
        for worker in workers:
            worker.cancel()
        return done

    assert asyncio.run(scenario()) == ["first", "during"]


def test_at_most_the_workers_run_at_once_and_a_failure_stops_no_worker() -> None:
    async def scenario() -> tuple[int, int]:
        queue, running, peak, done = ReconcileQueue(), 0, 0, 0

        async def reconcile(key: Key, reason: str) -> None:
            nonlocal running, peak, done
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0)  # yield: every worker that can take a request takes one
            running -= 1
            done += 1
            if key[1].endswith("3"):
                raise RuntimeError("boom")

        for i in range(40):
            queue.request(("ns", f"t{i}"), "burst")
        workers = queue.start(reconcile, 4)
        await asyncio.wait_for(queue.join(), 5)
        for worker in workers:
            worker.cancel()
        return peak, done

    peak, done = asyncio.run(scenario())
    assert peak == 4 and done == 40


def test_the_end_of_a_burst_is_announced_once_and_a_few_requests_are_no_burst() -> None:
    async def scenario(requests: int) -> int:
        queue, bursts = ReconcileQueue(), 0

        async def reconcile(key: Key, reason: str) -> None:
            await asyncio.sleep(0)

        def after_burst() -> None:
            nonlocal bursts
            bursts += 1

        workers = queue.start(reconcile, 4, after_burst=after_burst)
        for i in range(requests):
            queue.request(("ns", f"t{i}"), "burst")
        await asyncio.wait_for(queue.join(), 5)
        await asyncio.sleep(0)  # the last worker announces after its task_done
        for worker in workers:
            worker.cancel()
        return bursts

    assert asyncio.run(scenario(BURST + 50)) == 1
    assert asyncio.run(scenario(BURST - 1)) == 0
