"""ore-conduit-slack: Slack threads <-> ore threads.

Run it with `ore conduit slack`; configure it with the environment variables
SLACK_BOT_TOKEN, SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode),
and the `[plugins.slack]` table (see `SlackConfig` and the README).
`ore_conduit_slack.testing` has a fake Slack for tests.
"""

from ore_conduit_slack.conduit import SlackConduit
from ore_conduit_slack.config import MissingSecret, SlackConfig
from ore_conduit_slack.ids import SlackThread, event_id, traceparent_of
from ore_conduit_slack.text import Part, neutralise, split_parts

__all__ = [
    "MissingSecret",
    "Part",
    "SlackConduit",
    "SlackConfig",
    "SlackThread",
    "event_id",
    "neutralise",
    "split_parts",
    "traceparent_of",
]
