"""Bedrock provider against botocore's Stubber (every request is validated against the bedrock-runtime
model; ConverseStream answers are real event streams: tests/bedrock_stream_stub.py)."""

from __future__ import annotations

import random
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from unicore.errors import ConfigError, ModelError
from unicore.providers.base import ModelRequest, ToolSpec
from unicore.providers.bedrock import BedrockModel, BedrockSettings, converse_request
from unicore.providers.retry import RetryPolicy

from tests.answer_sink import RecordingSink as Sink
from tests.bedrock_stream_stub import add_stream, answer_events, text_events, tool_events

MODEL_ID = "us.anthropic.claude-sonnet-4-20250514-v1:0"


def runtime_client() -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def answer(
    content: list[dict[str, Any]], stop: str = "end_turn", inp: int = 11, out: int = 7
) -> list[dict[str, Any]]:
    return answer_events(content, stop, inp, out)


@pytest.fixture
def stubbed() -> Any:
    client = runtime_client()
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def make_model(
    client: Any, sleeps: Sleeps | None = None, uniform: Any = None, attempts: int = 8
) -> BedrockModel:
    return BedrockModel(
        MODEL_ID,
        client,
        policy=RetryPolicy(max_attempts=attempts),
        sleep=sleeps or Sleeps(),
        uniform=uniform or (lambda lo, hi: 1.0),
    )


def test_plain_text_call_maps_request_and_response(stubbed: Any) -> None:
    client, stubber = stubbed
    request = ModelRequest(
        task_id="demo",
        system="You are terse.",
        messages=[{"role": "user", "content": [{"text": "Say hi"}]}],
        max_tokens=256,
        temperature=0.2,
    )
    add_stream(stubber, client, answer([{"text": "Hi."}], inp=12, out=3),
        expected_params={
            "modelId": MODEL_ID,
            "messages": [{"role": "user", "content": [{"text": "Say hi"}]}],
            "system": [{"text": "You are terse."}],
            "inferenceConfig": {"maxTokens": 256, "temperature": 0.2},
        },
    )
    response = make_model(client).converse(request)
    assert response.content == [{"text": "Hi."}]
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        12,
        3,
        15,
    )
    assert response.model_id == MODEL_ID
    assert response.latency_seconds >= 0


def test_tool_use_round_trip(stubbed: Any) -> None:
    client, stubber = stubbed
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    tools = [ToolSpec(name="read_file", description="Read a file", input_schema=schema)]
    first = ModelRequest(
        task_id="demo", messages=[{"role": "user", "content": [{"text": "Read a.txt"}]}], tools=tools
    )
    tool_config = {
        "tools": [
            {"toolSpec": {"name": "read_file", "description": "Read a file", "inputSchema": {"json": schema}}}
        ]
    }
    add_stream(stubber, client, answer(
            [
                {"text": "Reading."},
                {"toolUse": {"toolUseId": "tu-1", "name": "read_file", "input": {"path": "a.txt"}}},
            ],
            stop="tool_use",
        ),
        expected_params={
            "modelId": MODEL_ID,
            "messages": first.messages,
            "inferenceConfig": {"maxTokens": 4096},
            "toolConfig": tool_config,
        },
    )
    model = make_model(client)
    response = model.converse(first)
    assert response.stop_reason == "tool_use"
    assert response.content[1] == {
        "toolUse": {"toolUseId": "tu-1", "name": "read_file", "input": {"path": "a.txt"}}
    }

    history = [
        *first.messages,
        {"role": "assistant", "content": response.content},
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "tu-1",
                        "content": [{"text": "hello"}, {"json": {"size": 5}}],
                        "status": "success",
                    }
                },
                {"text": "And summarise it."},
            ],
        },
    ]
    second = ModelRequest(task_id="demo", messages=history, tools=tools)
    add_stream(stubber, client, answer([{"text": "It says hello."}]),
        expected_params={
            "modelId": MODEL_ID,
            "messages": history,
            "inferenceConfig": {"maxTokens": 4096},
            "toolConfig": tool_config,
        },
    )
    final = model.converse(second)
    assert final.content == [{"text": "It says hello."}]
    assert final.stop_reason == "end_turn"


def test_tool_blocks_without_tools_are_sent_as_text(stubbed: Any) -> None:
    """A summary call (no tools) over a history with tool blocks must still be a valid Converse request."""
    client, stubber = stubbed
    history = [
        {"role": "user", "content": [{"text": "go"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "ls", "input": {"d": "."}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "a b"}], "status": "error"}}],
        },
    ]
    request = ModelRequest(task_id="demo", messages=history, purpose="summary")
    params = converse_request(MODEL_ID, request)
    assert "toolConfig" not in params
    assert params["messages"][1]["content"] == [{"text": '[called tool ls with {"d": "."}]'}]
    assert params["messages"][2]["content"] == [{"text": "[tool error: a b]"}]
    add_stream(stubber, client, answer([{"text": "Listed files."}]), expected_params=params)
    assert make_model(client).converse(request).content == [{"text": "Listed files."}]


def test_throttling_is_retried_with_exponential_backoff_then_succeeds(stubbed: Any) -> None:
    client, stubber = stubbed
    stubber.add_client_error("converse_stream", "ThrottlingException", "Too many requests", http_status_code=429)
    stubber.add_client_error("converse_stream", "TooManyRequestsException", "slow down", http_status_code=429)
    stubber.add_client_error("converse_stream", "ServiceUnavailableException", "busy", http_status_code=503)
    stubber.add_client_error("converse_stream", "ModelNotReadyException", "warming up", http_status_code=429)
    stubber.add_client_error("converse_stream", "SomethingNew", "overloaded", http_status_code=503)
    add_stream(stubber, client, answer([{"text": "Finally."}]))
    sleeps = Sleeps()
    jitters = iter([1.2, 0.8, 1.0, 1.1, 0.9])  # +20 %, -20 %, 0, +10 %, -10 %
    model = make_model(client, sleeps, uniform=lambda lo, hi: (lo, hi) == (0.8, 1.2) and next(jitters))
    response = model.converse(
        ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
    )
    assert response.content == [{"text": "Finally."}]
    assert sleeps.calls == pytest.approx([2 * 1.2, 4 * 0.8, 8 * 1.0, 16 * 1.1, 32 * 0.9])
    assert model.runner.delays == sleeps.calls


def test_throttling_gives_up_after_eight_tries(stubbed: Any) -> None:
    client, stubber = stubbed
    for _ in range(8):
        stubber.add_client_error("converse_stream", "ThrottlingException", "Rate exceeded", http_status_code=429)
    sleeps = Sleeps()
    rng = random.Random(7)
    model = make_model(client, sleeps, uniform=rng.uniform)
    with pytest.raises(
        ModelError, match=r"still throttled after 8 tries: ThrottlingException: Rate exceeded"
    ):
        model.converse(ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}]))
    assert len(sleeps.calls) == 7
    for n, delay in enumerate(sleeps.calls, start=1):
        nominal = 2.0 * 2 ** (n - 1)
        assert 0.8 * nominal <= delay <= 1.2 * nominal
    assert len({round(d / (2.0 * 2**n), 6) for n, d in enumerate(sleeps.calls)}) > 1  # jitter really varies


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ValidationException", 400),
        ("AccessDeniedException", 403),
        ("ResourceNotFoundException", 404),
        ("ModelErrorException", 424),
    ],
)
def test_other_errors_fail_immediately_with_code_and_message(stubbed: Any, code: str, status: int) -> None:
    client, stubber = stubbed
    stubber.add_client_error("converse_stream", code, f"the {code} message", http_status_code=status)
    sleeps = Sleeps()
    with pytest.raises(ModelError) as info:
        make_model(client, sleeps).converse(
            ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])
        )
    assert (
        code in str(info.value) and f"the {code} message" in str(info.value) and MODEL_ID in str(info.value)
    )
    assert sleeps.calls == []


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_missing_credentials_is_a_config_error(no_aws_env: None) -> None:
    settings = BedrockSettings(region="us-east-1", endpoint_url="http://127.0.0.1:9")  # never reached
    model = BedrockModel(MODEL_ID, settings.client("bedrock-runtime"), sleep=Sleeps())
    with pytest.raises(ConfigError) as info:
        model.converse(ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}]))
    message = str(info.value)
    assert "AWS_PROFILE" in message and "AWS_REGION" in message and "IRSA" in message
    assert "Unable to locate credentials" in message


def test_missing_region_is_a_config_error(no_aws_env: None) -> None:
    with pytest.raises(ConfigError, match="AWS_REGION"):
        BedrockSettings.from_env().client("bedrock-runtime")


def test_unknown_profile_is_a_config_error(no_aws_env: None) -> None:
    with pytest.raises(ConfigError, match="AWS_PROFILE"):
        BedrockSettings(region="us-east-1", profile="nope").client("bedrock-runtime")


def test_settings_from_env() -> None:
    env = {
        "AWS_REGION": "eu-west-1",
        "UNICORE_BEDROCK_RPM": "50",
        "UNICORE_BEDROCK_TPM": "100000",
        "UNICORE_BEDROCK_MAX_ATTEMPTS": "3",
        "UNICORE_BEDROCK_LIMITS": '{"claude-sonnet-4": {"rpm": 5, "window_seconds": 10}}',
    }
    settings = BedrockSettings.from_env(env)
    assert settings.region == "eu-west-1" and settings.retry.max_attempts == 3
    assert settings.limits.max_requests == 50 and settings.limits.max_tokens == 100000
    special = settings.limits_for("claude-sonnet-4", "eu.anthropic.claude-sonnet-4-20250514-v1:0")
    assert (special.max_requests, special.max_tokens, special.window_seconds) == (5, 100000, 10)
    assert settings.limits_for("nova-pro", "amazon.nova-pro-v1:0") == settings.limits
    # the per-model entry also applies when the model is named by its id
    assert (
        settings.limits_for(
            "eu.anthropic.claude-sonnet-4-20250514-v1:0", "eu.anthropic.claude-sonnet-4-20250514-v1:0"
        ).max_requests
        == 5
    )
    with pytest.raises(ConfigError, match="UNICORE_BEDROCK_LIMITS|max_requests"):
        BedrockSettings.from_env({"UNICORE_BEDROCK_LIMITS": '{"x": {"rpm": -1}}'})
    with pytest.raises(ConfigError):
        BedrockSettings.from_env({"UNICORE_BEDROCK_RPM": "many"})


def ask() -> ModelRequest:
    return ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "x"}]}])


def test_text_deltas_reach_the_sink_and_tool_input_fragments_are_joined(stubbed: Any) -> None:
    client, stubber = stubbed
    add_stream(stubber, client, text_events("Hello there, friend.", pieces=3))
    add_stream(stubber, client, tool_events("Reading.", "tu-9", "read_file", '{"path": "a.txt", "max_bytes": 10}'))
    sink = Sink()
    model = make_model(client)
    assert model.converse(ask(), sink).content == [{"text": "Hello there, friend."}]
    assert sink.deltas == ["Hello t", "here, f", "riend."] and sink.attempts == 1
    response = model.converse(ask(), sink)
    assert response.stop_reason == "tool_use" and sink.deltas == ["Reading."]
    assert response.content[1] == {
        "toolUse": {"toolUseId": "tu-9", "name": "read_file", "input": {"path": "a.txt", "max_bytes": 10}}
    }
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 7)


def test_a_connection_reset_mid_stream_is_retried_and_no_half_answer_returned(stubbed: Any) -> None:
    client, stubber = stubbed
    events = text_events("The whole answer, at last.", pieces=4)
    add_stream(stubber, client, events, reset_after=3)  # two text deltas in, then the connection resets
    add_stream(stubber, client, events[:-2])  # a body that ends cleanly but before messageStop: a cut too
    add_stream(stubber, client, events)
    sink, sleeps = Sink(), Sleeps()
    response = make_model(client, sleeps).converse(ask(), sink)
    assert response.content == [{"text": "The whole answer, at last."}]
    assert sink.attempts == 3 and "".join(sink.deltas) == "The whole answer, at last."
    assert sleeps.calls == [2.0, 4.0]


@pytest.mark.parametrize("code", ["throttlingException", "serviceUnavailableException",
                                  "modelStreamErrorException", "internalServerException"])
def test_exception_events_inside_the_stream_are_retried(stubbed: Any, code: str) -> None:
    client, stubber = stubbed
    add_stream(stubber, client, [*text_events("Hal")[:2], {code: {"message": "try again"}}])
    add_stream(stubber, client, text_events("Whole."))
    sleeps = Sleeps()
    model = make_model(client, sleeps)
    assert model.converse(ask()).content == [{"text": "Whole."}]
    assert sleeps.calls == [2.0]


def test_internal_server_errors_are_retried_as_transient(stubbed: Any) -> None:
    client, stubber = stubbed
    stubber.add_client_error("converse_stream", "InternalServerException", "oops", http_status_code=500)
    add_stream(stubber, client, text_events("fine"))
    sleeps = Sleeps()
    assert make_model(client, sleeps).converse(ask()).content == [{"text": "fine"}]
    assert sleeps.calls == [2.0]


def test_a_validation_exception_event_fails_the_call(stubbed: Any) -> None:
    client, stubber = stubbed
    add_stream(stubber, client, [*text_events("x")[:1], {"validationException": {"message": "bad input"}}])
    with pytest.raises(ModelError, match="ValidationException.*bad input"):
        make_model(client).converse(ask())
