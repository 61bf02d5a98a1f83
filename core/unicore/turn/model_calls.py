"""The turn's model calls: each admitted by the tree's token budget first, the turn's answers streamed live while
they are generated, and each call's usage counted once it is stored."""

from __future__ import annotations

import redis

from unicore.errors import ConfigError, ModelError, TurnCancelled
from unicore.providers.base import Model, ModelRequest, ModelResponse
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamSettings, TokenStreamSink
from unicore.traces import calls as call_traces
from unicore.turn.budget import TreeBudget
from unicore.turn.checkpoints import Checkpoints
from unicore.turn.lease import TurnLease
from unicore.turn.outcome import TurnOutcome


class ModelCalls:
    """The model calls of one turn of ``task_id``. ``budget``: the tree's token budget (``unicore.turn.budget``),
    set once the turn knows its tree; None: calls are not budgeted. ``outcome`` names the turn and counts its calls
    (the live stream names a call by them)."""

    def __init__(self, client: redis.Redis, store: TaskStore, lease: TurnLease, checkpoints: Checkpoints,
                 outcome: TurnOutcome, live: StreamSettings) -> None:
        self.redis = client
        self.store = store
        self.lease = lease
        self.checkpoints = checkpoints
        self.outcome = outcome
        self.live = live
        self.budget: TreeBudget | None = None
        self.answer_seq = 0  # the seq the next model answer gets when stored (the live stream names calls by it)

    def answer(self, model: Model, request: ModelRequest, seq: int) -> ModelResponse:
        """The turn's next answer (purpose "turn"), to be stored as message ``seq``; BudgetUsedUp: no call was made.
        The caller stores its usage, then calls ``usage_counted``."""
        self.answer_seq = seq
        response = self.call(model, request)
        self.checkpoints.fault_point("after model call")
        return response

    def call(self, model: Model, request: ModelRequest) -> ModelResponse:
        """One model call, once the tree's token budget admits it (BudgetUsedUp: not made). The caller stores its
        usage, then calls ``usage_counted``."""
        # The model's metrics (model_calls_total, model_tokens_total, model_call_duration_seconds) have one owner,
        # the provider's CallRunner (unicore.providers.calling), so a call is counted once.
        if self.budget is not None:
            self.budget.admit(request)
        self.checkpoints.begin(f"model call ({request.purpose})")
        sink = self._answer_sink(request)
        try:
            with call_traces.model_call(model, request, sink) as traced:  # its ``chat`` span (unicore.traces.calls)
                response = model.converse(request, traced.sink(sink))
                traced.answered(response)
        except (TurnCancelled, ModelError, ConfigError):
            self.usage_counted()  # nothing to count
            raise
        except Exception as exc:  # a provider bug is a model failure of this turn
            self.usage_counted()
            raise ModelError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if sink is not None:
                sink.close()
        self.checkpoints.end("after model call")
        if not response.content and request.purpose != "turn":
            raise ModelError("the model returned an empty message")
        return response  # an empty turn answer is refused by accept_answer: the model is told and asked again

    def summary_call(self, model: Model, request: ModelRequest) -> ModelResponse:
        """A model call with purpose "summary" (the turn's, a compaction's); its usage counts for the task."""
        response = self.call(model, request)
        self.store.record_usage(self.lease.held, response.usage)
        self.usage_counted()
        return response

    def usage_counted(self) -> None:
        """The last call's usage is stored (and rolled up on the root): its budget reservation goes back."""
        if self.budget is not None:
            self.budget.release()

    def release_budget(self) -> None:
        """The turn is over: whatever it still holds of the tree's budget goes back (left behind, it expires)."""
        if self.budget is not None:
            self.budget.release_quietly()

    def _answer_sink(self, request: ModelRequest) -> TokenStreamSink | None:
        """The live stream of a turn's model call (``unicore.store.token_stream``); None for summaries or when off."""
        if request.purpose != "turn" or self.live.entries <= 0 or self.outcome.turn_number is None:
            return None
        return TokenStreamSink(self.redis, self.outcome.task_id, turn=self.outcome.turn_number,
                               call=self.outcome.iterations, seq=self.answer_seq, settings=self.live)
