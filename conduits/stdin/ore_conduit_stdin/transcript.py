"""What a turn has said so far, in order, built from deltas and complete artifacts.

Deltas are best effort and may overtake the complete artifacts they add up to (the
complete ones are stored first). A delta grows the newest open block of its kind; a
complete artifact settles the oldest open block of its kind with its exact content,
so the final transcript is right even when some deltas were lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ore_core import Artifact, Reasoning, ReasoningDelta, Text, TextDelta, ToolCall, ToolResult

__all__ = ["Block", "BlockKind", "Transcript"]

BlockKind = Literal["text", "reasoning", "tool_call", "tool_result"]


@dataclass
class Block:
    """One piece of a reply; `open` while deltas may still add to it."""

    kind: BlockKind
    content: str
    open: bool = False
    error: bool = False


class Transcript:
    """The blocks of one turn, in the order they started."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []

    @property
    def streaming(self) -> bool:
        """True while some block is still growing from deltas."""
        return any(block.open for block in self.blocks)

    def add(self, artifact: Artifact) -> bool:
        """Take in one artifact; False when it is not something to show."""
        match artifact:
            case TextDelta(content=content):
                self._grow("text", content)
            case ReasoningDelta(content=content):
                self._grow("reasoning", content)
            case Text(content=content):
                self._settle("text", content)
            case Reasoning(content=content):
                self._settle("reasoning", content)
            case ToolCall():
                call = f"{artifact.name} {artifact.markdown_string()}"
                self.blocks.append(Block("tool_call", call))
            case ToolResult():
                self.blocks.append(
                    Block("tool_result", artifact.markdown_string(), error=artifact.is_error)
                )
            case _:
                return False
        return True

    def _grow(self, kind: BlockKind, content: str) -> None:
        last = self.blocks[-1] if self.blocks else None
        if last is not None and last.open and last.kind == kind:
            last.content += content
        else:
            self.blocks.append(Block(kind, content, open=True))

    def _settle(self, kind: BlockKind, content: str) -> None:
        for block in self.blocks:
            if block.open and block.kind == kind:
                block.content = content
                block.open = False
                return
        self.blocks.append(Block(kind, content))
