"""A model call's overhead with tracing on (issue 32): the turn's call path, in one process, tracing off vs on.

What the turn does around each model call (``unicore.turn.model_calls.ModelCalls.call``, without its budget and
checkpoint bookkeeping, which tracing does not touch): ``unicore.traces.calls.model_call`` (the ``chat <model>``
span), the model's ``converse`` with ``traced.sink(sink)`` (a live view: ``NoSink``; tracing on, the span's
first-chunk clock sits in front of it) and ``traced.answered(response)`` (usage, finish reason, time to first chunk on
the span). Two models:

* the scripted model (``unicore.providers.scripted``), a small script streaming one sentence word by word: no I/O,
  so the difference is the tracing itself;
* the OpenAI-compatible provider against an endpoint on localhost that answers at once (the cheapest real call a
  turn can make; its tracing-off time is the anchor, measured in the same run).

Tracing on is what a turn gets: ``unicore.traces.setup.start`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a
real Jaeger this benchmark starts (``JaegerServer``: ``--jaeger``, else ``find_jaeger_binary``'s search), the calls'
spans under one ``invoke_agent`` span per block, as a turn's are. Blocks of ``--block`` calls of each model alternate
off and on (which goes first alternates per round) to cancel drift; ``setup.stop()`` after each block on flushes its
spans to Jaeger (not timed: the batch processor's thread exports them in a turn; its time per span is printed) and
turns tracing off (``spans.active()`` is checked). The first round is a warm-up, not counted. At the end, one
block's trace is read back from Jaeger.

Target (issue 32): the p50 difference on - off at most 1 ms.

Usage: .venv/bin/python bench/bench_trace_overhead.py [--rounds 20] [--block 100] [--jaeger PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from unicore.providers.base import Model, ModelRequest, NoSink  # noqa: E402
from unicore.providers.openai_compat import OpenAISettings, build_openai_model  # noqa: E402
from unicore.providers.scripted import ScriptedModel, load_script  # noqa: E402
from unicore.traces import calls, setup, spans  # noqa: E402

from bench.bench_turn_start import FirstRequestClock  # noqa: E402

SERVICE = "bench-trace-overhead"
SCRIPT = {"default": "The answer is forty-two, and that is all there is to say about it."}
REQUEST = ModelRequest(task_id="bench", system="You are a benchmark.",
                       messages=[{"role": "user", "content": [{"text": "What is the answer?"}]}])


def one_call(model: Model) -> int:
    """The turn's model call path once; its duration in ns."""
    sink = NoSink()
    began = time.perf_counter_ns()
    with calls.model_call(model, REQUEST, sink) as traced:
        response = model.converse(REQUEST, traced.sink(sink))
        traced.answered(response)
    elapsed = time.perf_counter_ns() - began
    if not response.content:
        raise RuntimeError("the model answered nothing")
    return elapsed


def block(model: Model, calls_per_block: int, traced: bool, env: dict[str, str]) -> tuple[list[int], str | None,
                                                                                        float]:
    """``calls_per_block`` timed calls, tracing ``traced``; (durations in ns, the block's trace id or None, the time
    ``setup.stop()`` took to flush the block's spans in s)."""
    if traced and not setup.start(SERVICE, env):
        raise RuntimeError("tracing did not start")
    if spans.active() != traced:
        raise RuntimeError(f"spans.active() is {spans.active()}, expected {traced}")
    parent = spans.start("invoke_agent bench") if traced else None
    durations = [one_call(model) for _ in range(calls_per_block)]
    trace_id = None
    flushed = 0.0
    if parent is not None:
        ref = parent.live.ref
        trace_id = ref.trace_id if ref is not None else None
        parent.close()
        began = time.perf_counter()
        setup.stop()
        flushed = time.perf_counter() - began
    if spans.active():
        raise RuntimeError("tracing is still on after setup.stop()")
    return durations, trace_id, flushed


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def row(label: str, ns: list[int]) -> str:
    us = [value / 1000 for value in ns]
    return (f"| {label} | {len(us)} | {statistics.median(us):.1f} | {quantile(us, 0.99):.1f} | {min(us):.1f} | "
            f"{max(us):.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="rounds of off/on blocks of each model (default 20)")
    parser.add_argument("--block", type=int, default=100, help="calls per block (default 100)")
    parser.add_argument("--jaeger", help="the jaeger binary (default: find_jaeger_binary's search)")
    args = parser.parse_args()
    if not (1 <= args.rounds <= 1000 and 1 <= args.block <= 500):
        print("bench_trace_overhead: --rounds takes 1-1000, --block 1-500", file=sys.stderr)
        return 2
    from unicore_client.traces.jaeger import JaegerNotFound, JaegerServer

    try:
        jaeger = JaegerServer(args.jaeger)
    except JaegerNotFound as exc:
        print(f"bench_trace_overhead: needs a jaeger binary: {exc}", file=sys.stderr)
        return 2
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        del os.environ[name]  # off means off; on is only what start() below configures
    endpoint = FirstRequestClock()
    models: dict[str, Any] = {
        "scripted": ScriptedModel(load_script(SCRIPT), name="bench"),
        "openai (localhost)": build_openai_model("bench", settings=OpenAISettings(base_url=endpoint.url,
                                                                                   api_key="x")),
    }
    times: dict[tuple[str, bool], list[int]] = {(name, traced): [] for name in models for traced in (False, True)}
    flushes: list[float] = []
    last_trace: str | None = None
    with jaeger:
        # the exporter reads its endpoint from the process's environment (setup._LazyOtlpExporter)
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = jaeger.otlp_endpoint
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint}
        try:
            for n in range(-1, args.rounds):  # -1: the warm-up (first spans, the exporter's import, first export)
                for name, model in models.items():
                    for traced in ((False, True) if n % 2 == 0 else (True, False)):
                        durations, trace_id, flushed = block(model, args.block, traced, env)
                        if n < 0:
                            continue
                        times[(name, traced)].extend(durations)
                        if traced:
                            flushes.append(flushed)
                            last_trace = trace_id or last_trace
            found = jaeger.wait_for_spans(last_trace, args.block + 1) if last_trace else None
        finally:
            setup.stop()
            del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    print("| call path | tracing | calls | p50 (us) | p99 (us) | min (us) | max (us) |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for traced in (False, True):
            label = f"{name} | {'on (OTLP to Jaeger)' if traced else 'off'}"
            if name != "scripted" and not traced:
                label += " (anchor)"
            print(row(label, times[(name, traced)]))
    anchor = statistics.median(times[("openai (localhost)", False)])
    print()
    for name in models:
        off, on = statistics.median(times[(name, False)]), statistics.median(times[(name, True)])
        off99, on99 = quantile(times[(name, False)], 0.99), quantile(times[(name, True)], 0.99)
        print(f"- {name}: p50 on - off **{(on - off) / 1e6:+.3f} ms** (target <= 1 ms), on / off {on / off:.2f}x, "
              f"p99 on - off {(on99 - off99) / 1e6:+.3f} ms; off / anchor {off / anchor:.2f}x")
    print(f"\n{args.rounds} rounds of {args.block} calls per block and model (a warm-up round not counted); "
          f"setup.stop() after a block on (its {args.block + 1} spans exported to Jaeger, the provider shut down; "
          f"not in the times above): median {1000 * statistics.median(flushes):.1f} ms")
    spans_back = len(found.get("spans", [])) if found else 0
    print(f"the last block's trace in Jaeger: {spans_back} spans (expected {args.block + 1})")
    if spans_back < args.block + 1:
        print("bench_trace_overhead: the spans did not reach Jaeger", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
