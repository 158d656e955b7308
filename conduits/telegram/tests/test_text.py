"""Splitting long answers and rendering Markdown as Telegram HTML."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ore_conduit_telegram.testing.fake import _parse_html
from ore_conduit_telegram.text import fence_at, split_text, to_html

_WORD = st.text(alphabet="abcxyz<>&*_`", min_size=1, max_size=12)
_LINE = st.one_of(
    st.lists(_WORD, min_size=0, max_size=12).map(" ".join),
    st.sampled_from(["```", "```python", ""]),
)
_FENCES = re.compile(r"```\w*")


def _content(text: str) -> str:
    return "".join(_FENCES.sub("", text).split())


@settings(deadline=None, max_examples=100)
@given(st.lists(_LINE, max_size=80).map("\n".join), st.integers(min_value=64, max_value=400))
def test_parts_fit_keep_fences_balanced_and_lose_nothing(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(len(part) <= limit for part in parts)
    assert all(fence_at(part) is None for part in parts[:-1])
    assert _content("\n".join(parts)) == _content(text)


def test_a_split_prefers_paragraph_boundaries() -> None:
    text = "a" * 50 + "\n\n" + "b" * 50 + "\nc" * 5
    assert split_text(text, 70) == ["a" * 50, "b" * 50 + "\nc" * 5]


def test_a_fence_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "```js\n" + "\n".join(f"x{i}();" for i in range(30)) + "\n```"
    first, second, *_ = split_text(code, 120)
    assert first.startswith("```js\n")
    assert first.endswith("\n```")
    assert second.startswith("```js\n")


def test_markdown_becomes_telegram_html_that_telegram_accepts() -> None:
    markdown = (
        "# Title\n**bold**, *it*, ~~gone~~, `a<b`, [link](https://x.org) & 1 < 2\n"
        "```py\nif a < b:\n```"
    )
    html = to_html(markdown)
    assert html == (
        "<b>Title</b>\n<b>bold</b>, <i>it</i>, <s>gone</s>, <code>a&lt;b</code>, "
        '<a href="https://x.org">link</a> &amp; 1 &lt; 2\n'
        '<pre><code class="language-py">if a &lt; b:</code></pre>'
    )
    assert _parse_html(html).startswith("Title\nbold, it, gone, a<b, link & 1 < 2")


@settings(deadline=None, max_examples=100)
@given(st.lists(_LINE, max_size=20).map("\n".join))
def test_the_html_of_any_text_shows_no_more_than_its_source(text: str) -> None:
    html = to_html(text)
    try:
        shown = _parse_html(html)
    except Exception:  # refused entities: the conduit sends the source as plain text
        return
    assert len(shown) <= len(text)
