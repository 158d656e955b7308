"""Redaction with the default patterns: every kind of key goes, ordinary text stays."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ore_guard.config import GuardConfig
from ore_guard.redact import Redactor, marker

redactor = Redactor(GuardConfig().redaction_patterns())

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBo+abc/def==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("openai_key", "sk-" + "A1b2C3d4E5" * 5),
        ("openai_key", "sk-proj-Ab_Cd-Ef1234567890ghIJklMNopQRstUVwx"),
        ("slack_token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
        ("slack_token", "xoxp-1234567890-abcdef"),
        ("aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"),
        ("aws_access_key_id", "ASIAY34FZKBOKMUTVV7A"),
        ("github_token", "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"),
        ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv"),
        ("private_key", PEM),
        ("private_key", PEM.replace("OPENSSH ", "")),
    ],
)
def test_a_default_pattern_replaces_the_secret_with_its_marker(name: str, secret: str) -> None:
    result = redactor.redact(f"use this: {secret}\nthanks")
    assert result.text == f"use this: {marker(name)}\nthanks"
    assert result.counts == {name: 1}


def test_a_private_key_without_its_end_line_is_redacted_to_the_end() -> None:
    cut_short = PEM.rsplit("\n", 1)[0]
    assert redactor.redact(f"key:\n{cut_short}").text == f"key:\n{marker('private_key')}"


def test_a_key_inside_a_private_key_block_is_counted_once_as_the_block() -> None:
    block = PEM.replace("QyNTUxOQ", "sk-" + "x" * 30)
    assert redactor.redact(block).counts == {"private_key": 1}


def test_each_secret_is_counted_under_its_pattern_name() -> None:
    text = "AKIAIOSFODNN7EXAMPLE and AKIAI44QH8DHBEXAMPLE and sk-" + "z" * 40
    assert redactor.redact(text).counts == {"openai_key": 1, "aws_access_key_id": 2}


def test_words_that_merely_contain_sk_dash_are_kept() -> None:
    text = "the risk-assessment-for-the-quarterly-report is done; task-1234567890abcdefghij"
    assert redactor.redact(text).text == text


def test_a_short_sk_token_is_not_a_key() -> None:
    assert not redactor.redact("pip install sk-learn").changed


def test_a_pattern_that_matches_empty_strings_inserts_no_markers() -> None:
    lookahead = Redactor({"before_a": re.compile("(?=a)")})
    result = lookahead.redact("banana")
    assert (result.text, result.counts) == ("banana", {})


def test_the_marker_is_inserted_literally_not_as_a_template() -> None:
    odd = Redactor({r"x\g<0>": re.compile("secret")})
    assert odd.redact("a secret").text == r"a [REDACTED:x\g<0>]"


# Ordinary prose: words of at most 14 word characters joined by separators that no key
# contains. Every default key needs a longer run (or a "-----BEGIN" line), so such text
# can never hold a secret, whatever hypothesis generates.
words = st.from_regex(r"\w{1,14}", fullmatch=True)
separators = st.sampled_from([" ", "  ", ", ", ". ", "\n", "\t", ": ", "=", "'", '"', "(", ")"])
prose = st.lists(st.tuples(words, separators), max_size=30).map(
    lambda pairs: "".join(word + sep for word, sep in pairs)
)

_b64_line = st.from_regex(r"[A-Za-z0-9+/]{1,70}={0,2}", fullmatch=True)
private_keys = st.builds(
    lambda kind, lines: (
        f"-----BEGIN {kind}PRIVATE KEY-----\n"
        + "\n".join(lines)
        + f"\n-----END {kind}PRIVATE KEY-----"
    ),
    st.sampled_from(["", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED "]),
    st.lists(_b64_line, min_size=1, max_size=8),
)
secrets = st.one_of(
    st.tuples(
        st.just("openai_key"), st.from_regex(r"sk-(proj-)?[A-Za-z0-9_-]{20,80}", fullmatch=True)
    ),
    st.tuples(
        st.just("slack_token"), st.from_regex(r"xox[bap]-[A-Za-z0-9-]{10,60}", fullmatch=True)
    ),
    st.tuples(
        st.just("aws_access_key_id"), st.from_regex(r"(AKIA|ASIA)[A-Z0-9]{16}", fullmatch=True)
    ),
    st.tuples(
        st.just("github_token"), st.from_regex(r"gh[pousr]_[A-Za-z0-9]{36,40}", fullmatch=True)
    ),
    st.tuples(
        st.just("github_token"), st.from_regex(r"github_pat_[A-Za-z0-9_]{22,82}", fullmatch=True)
    ),
    st.tuples(st.just("private_key"), private_keys),
)


@given(prose)
def test_text_without_secrets_passes_unchanged(text: str) -> None:
    result = redactor.redact(text)
    assert (result.text, result.counts) == (text, {})


@given(before=prose, secret=secrets, after=prose, sep=separators)
def test_a_generated_secret_never_survives_redaction(
    before: str, secret: tuple[str, str], after: str, sep: str
) -> None:
    name, key = secret
    result = redactor.redact(before + key + sep + after)
    assert key not in result.text
    assert result.text == before + marker(name) + sep + after
