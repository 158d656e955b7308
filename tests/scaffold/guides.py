"""Applying a guide's ```diff block to the file `ore new` generates: the guides go on
from the generated files (issue 43), and these tests keep the two in step."""

from __future__ import annotations

from tests.paths import DOCS

__all__ = ["diff_of", "patched"]


def diff_of(page: str) -> list[list[str]]:
    """The hunks (split at `@@` lines) of the first ```diff block of `page`."""
    text = (DOCS / page).read_text().split("```diff\n", 1)[1].split("```", 1)[0]
    hunks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            hunks.append([])
        else:
            hunks[-1].append(line)
    return hunks


def patched(source: str, hunks: list[list[str]]) -> str:
    """`source` with the hunks applied in order: each hunk's context and removed lines
    must stand together in the source, after the hunk before it."""
    lines, done = source.splitlines(), 0
    for hunk in hunks:
        before = [line[1:] for line in hunk if line[0] in " -"]
        after = [line[1:] for line in hunk if line[0] in " +"]
        at = next(
            (i for i in range(done, len(lines)) if lines[i : i + len(before)] == before), None
        )
        assert at is not None, f"the guide's hunk does not apply: {before}"
        lines[at : at + len(before)] = after
        done = at + len(after)
    return "\n".join(lines) + "\n"
