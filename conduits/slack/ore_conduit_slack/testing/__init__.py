"""Test helpers for the Slack conduit, reusable by anyone testing against Slack offline.

`FakeSlack` is a local Slack (Web API, Socket Mode, Events API) on 127.0.0.1;
`FakeClock` drives its stream expiry; `SlackPlatform` adapts it to ore's conduit
conformance kit.
"""

from ore_conduit_slack.testing.fake import FakeClock, FakeMessage, FakeSlack, RecordedCall
from ore_conduit_slack.testing.platform import SlackPlatform

__all__ = ["FakeClock", "FakeMessage", "FakeSlack", "RecordedCall", "SlackPlatform"]
