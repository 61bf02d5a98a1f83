"""OpenTelemetry traces of task trees (issue 32): one trace per tree, in the GenAI semantic conventions.

* ``setup``: whether the standard ``OTEL_*`` variables configure an exporter, and the one tracer provider of a
  process (turn, operator, local mode). Nothing configured: nothing is set up, no span is built (the SDK is not even
  imported) and every helper below is a no-op.
* ``spans``: the one way UniCore code makes spans (a context manager, after-the-fact spans, W3C ``traceparent``
  strings to store with tasks and messages).
* ``genai``: the attribute names and values of the GenAI semantic conventions UniCore uses (one owner).
* ``anchors``: where a task's turns hang in its tree's trace: the spawn call that created it (a child), or a
  ``task`` span its creator emits (a root); stored with the task in Redis (``TaskRecord.trace_parent``).
"""
