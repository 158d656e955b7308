"""Splitting long answers and neutralising broadcasts (pure functions)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ore_conduit_slack import neutralise, split_parts
from ore_conduit_slack.text import fence_at

LINES = st.sampled_from(
    ["", "plain words here", "```python", "```", "x = 1", "- item", "# Title", "a " * 30]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(LINES, max_size=200), st.integers(min_value=60, max_value=400))
def test_parts_fit_keep_fences_balanced_and_join_to_the_source(
    lines: list[str], limit: int
) -> None:
    text = "\n".join(lines)
    parts = split_parts(text, limit)
    assert "".join(part.body for part in parts) == text
    assert all(len(part.text) <= limit for part in parts)
    assert all(fence_at(part.text) is None for part in parts[:-1])


def test_a_cut_prefers_a_paragraph_then_a_line_then_a_space() -> None:
    text = "first paragraph line\nsecond line\n\nnext paragraph " + "w" * 30
    assert split_parts(text, 40)[0].body == "first paragraph line\nsecond line\n\n"
    assert split_parts("aaaa bbbb\ncccc dddd eeee", 16)[0].body == "aaaa bbbb\n"
    assert split_parts("aaaa bbbb cccc dddd", 12)[0].body == "aaaa bbbb "


def test_a_fence_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "```python\n" + "\n".join(f"line_{i} = {i}" for i in range(40)) + "\n```"
    first, second, *_ = split_parts(code, 200)
    assert first.text.endswith("\n```")
    assert second.text.startswith("```python\n")
    assert fence_at(first.text) is None


def test_broadcasts_are_escaped_and_user_mentions_kept() -> None:
    text = "ping <!here>, <!channel>, <!everyone>, <!subteam^S1|@team> and <@U123>"
    assert neutralise(text) == (
        "ping &lt;!here&gt;, &lt;!channel&gt;, &lt;!everyone&gt;, "
        "&lt;!subteam^S1|@team&gt; and <@U123>"
    )
