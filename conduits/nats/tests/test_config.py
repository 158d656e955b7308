"""The `[plugins.nats]` settings: defaults, and one clear error per bad key."""

from __future__ import annotations

import pytest

from ore_conduit_nats import NatsBridge, NatsBridgeConfig
from ore_core.conduit import ConduitConfigError


def test_defaults_bridge_plain_text_on_the_bridge_prefix() -> None:
    config = NatsBridge.load_config({})
    assert config == NatsBridgeConfig(
        prefix="bridge", output="text", request_timeout=60.0, durable="nats-bridge"
    )


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"prefix": "bridge.*"}, "prefix"),
        ({"prefix": ""}, "prefix"),
        ({"output": "xml"}, "output"),
        ({"request_timeout": 0}, "request_timeout"),
        ({"durable": "with_underscore"}, "durable"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"prefx": "typo"}, "prefx"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConduitConfigError, match=rf"\[plugins\.nats\] settings: {key}:"):
        NatsBridge.load_config(section)
