"""Turns -> chat completion request messages and tool declarations."""

from __future__ import annotations

from ore_core import (
    Artifact,
    Image,
    Reasoning,
    Role,
    StopReason,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Turn,
    Usage,
)
from ore_openai.messages import UNANSWERED_TOOL_CALL, to_messages, to_tool_params


def turn(role: Role, *artifacts: Artifact) -> Turn:
    return Turn(id=f"t-{role}", role=role, artifacts=list(artifacts))


def test_system_prompt_is_the_first_and_only_system_message() -> None:
    messages = to_messages([turn(Role.USER, Text("hi"))], "be brief")
    assert messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]


def test_no_system_message_without_a_system_prompt() -> None:
    assert to_messages([turn(Role.USER, Text("hi"))]) == [{"role": "user", "content": "hi"}]


def test_stored_system_turns_are_sent_as_system_messages() -> None:
    messages = to_messages([turn(Role.SYSTEM, Text("summary")), turn(Role.USER, Text("go"))])
    assert messages[0] == {"role": "system", "content": "summary"}


def test_user_text_blocks_are_joined_into_plain_content() -> None:
    messages = to_messages([turn(Role.USER, Text("one"), Text("two"))])
    assert messages == [{"role": "user", "content": "one\n\ntwo"}]


def test_user_images_become_image_url_parts_next_to_the_text() -> None:
    messages = to_messages([turn(Role.USER, Text("what is this?"), Image("data:image/png;x"))])
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;x"}},
            ],
        }
    ]


def test_reasoning_usage_and_stop_reason_are_not_sent_back() -> None:
    answer = turn(
        Role.ASSISTANT,
        Reasoning("hmm"),
        Text("42"),
        StopReason("stop"),
        Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
    )
    assert to_messages([answer]) == [{"role": "assistant", "content": "42"}]


def test_assistant_turn_with_only_reasoning_is_left_out() -> None:
    assert to_messages([turn(Role.ASSISTANT, Reasoning("thinking"))]) == []


def test_tool_calls_and_results_pair_up_by_id() -> None:
    messages = to_messages(
        [
            turn(Role.ASSISTANT, ToolCall("c1", "add", '{"a":1}')),
            turn(Role.TOOL, ToolResult("c1", "2")),
        ]
    )
    assert messages == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]


def test_tool_result_sends_the_error_text_of_a_failed_call() -> None:
    messages = to_messages(
        [
            turn(Role.ASSISTANT, ToolCall("c1", "x", "{}")),
            turn(Role.TOOL, ToolResult("c1", "boom", is_error=True)),
        ]
    )
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "boom"}


def test_an_unanswered_tool_call_gets_an_error_result_before_the_next_message() -> None:
    messages = to_messages(
        [
            turn(Role.ASSISTANT, ToolCall("c1", "slow", "{}"), ToolCall("c2", "fast", "{}")),
            turn(Role.TOOL, ToolResult("c2", "done")),
            turn(Role.USER, Text("why so quiet?")),
        ]
    )
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": UNANSWERED_TOOL_CALL}


def test_a_trailing_unanswered_tool_call_is_answered_too() -> None:
    messages = to_messages([turn(Role.ASSISTANT, ToolCall("c1", "slow", "{}"))])
    assert messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": UNANSWERED_TOOL_CALL}


def test_tools_are_declared_as_functions_with_their_schema() -> None:
    async def add(a: int, b: int) -> int:
        return a + b

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert to_tool_params([Tool("add", "Adds numbers", schema, add)]) == [
        {
            "type": "function",
            "function": {"name": "add", "description": "Adds numbers", "parameters": schema},
        }
    ]
