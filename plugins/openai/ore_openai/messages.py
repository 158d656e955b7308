"""Conversation turns -> the `messages` and `tools` of a chat completions request.

The request is a per-call view: the system prompt is prepended here on every call
and never stored, so a tool loop sends it exactly once per request however many
round trips it makes. Reasoning, usage and stop reasons stay out of the request.
An assistant tool call left without a result (the turn was cancelled while the tool
ran) gets a synthetic error result, because the API rejects a history where a tool
call goes unanswered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ore_core import Image, Role, Text, Tool, ToolCall, ToolResult, Turn
from ore_core.artifacts import Attachment
from ore_openai.files import describe

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallParam,
        ChatCompletionToolParam,
    )

__all__ = ["UNANSWERED_TOOL_CALL", "to_messages", "to_tool_params"]

UNANSWERED_TOOL_CALL = "error: this tool call was interrupted before it returned a result"


def to_messages(
    turns: Iterable[Turn],
    system_prompt: str = "",
    files: Mapping[str, ChatCompletionContentPartParam] | None = None,
) -> list[ChatCompletionMessageParam]:
    """The request messages for `turns` (oldest first), `system_prompt` first if set.

    `files` is the content part of each attachment by sha256 (`ore_openai.files`); an
    attachment without one is described in a line.

    One pass, one message dict per turn (a long thread's request is rebuilt for every
    model call: bench/request_build.py keeps it within 2x of serialising the turns).
    """
    messages: list[ChatCompletionMessageParam] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    unanswered: list[str] = []
    for turn in turns:
        role = turn.role
        if role == Role.TOOL:
            for result in turn.artifacts:
                if isinstance(result, ToolResult):
                    messages.append(_tool_message(result.tool_call_id, result.llm_string()))
                    if result.tool_call_id in unanswered:
                        unanswered.remove(result.tool_call_id)
            continue
        if unanswered:
            messages += _answer(unanswered)
            unanswered = []
        if role == Role.ASSISTANT:
            message = _assistant(turn)
            if message is not None:
                messages.append(message)
                unanswered = [c["id"] for c in message.get("tool_calls", ())]
        elif role == Role.SYSTEM:
            text = _text_of(turn)
            if text:
                messages.append({"role": "system", "content": text})
        else:
            content = _user_content(turn, files or {})
            if content:
                messages.append({"role": "user", "content": content})
    messages += _answer(unanswered)
    return messages


def to_tool_params(tools: Iterable[Tool]) -> list[ChatCompletionToolParam]:
    """Function-tool declarations for the request's `tools` field."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in tools
    ]


def _text_of(turn: Turn) -> str:
    return "\n\n".join(a.content for a in turn.artifacts if isinstance(a, Text) and a.content)


def _user_content(
    turn: Turn, files: Mapping[str, ChatCompletionContentPartParam]
) -> str | list[ChatCompletionContentPartParam]:
    """Plain text when there is no image (the form every compatible server accepts),
    else the parts in order; empty when the turn has nothing to send."""
    artifacts = turn.artifacts
    if all(isinstance(a, Text) for a in artifacts):
        return _text_of(turn)
    parts: list[ChatCompletionContentPartParam] = []
    for artifact in artifacts:
        if isinstance(artifact, Text) and artifact.content:
            parts.append({"type": "text", "text": artifact.content})
        elif isinstance(artifact, Image) and artifact.url:
            parts.append({"type": "image_url", "image_url": {"url": artifact.url}})
        elif isinstance(artifact, Attachment):
            parts.append(files.get(artifact.sha256) or describe(artifact))
    if all(part["type"] == "text" for part in parts):
        return "\n\n".join(part["text"] for part in parts)  # type: ignore[typeddict-item]
    return parts


def _assistant(turn: Turn) -> ChatCompletionAssistantMessageParam | None:
    calls: list[ChatCompletionMessageToolCallParam] = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.llm_string()},
        }
        for call in turn.artifacts
        if isinstance(call, ToolCall)
    ]
    text = _text_of(turn)
    if not text and not calls:
        return None
    message: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(tool_call_id: str, content: str) -> ChatCompletionMessageParam:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def _answer(call_ids: Iterable[str]) -> list[ChatCompletionMessageParam]:
    return [_tool_message(call_id, UNANSWERED_TOOL_CALL) for call_id in call_ids]
