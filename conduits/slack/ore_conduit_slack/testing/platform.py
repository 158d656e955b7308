"""SlackPlatform: the fake Slack as a `FakePlatform` of ore's conduit conformance kit.

A kit conversation is a Slack thread in channel `C<conversation>`: the first message is
the thread's root (an @mention), the others are replies in it. A reply is an answer
the conduit finished (its last message carries `last` in its metadata), or a relayed
copy (`ore_relay` metadata: the kit's bridging check answers nothing).
"""

from __future__ import annotations

from ore_conduit_slack.answer import RELAY_EVENT
from ore_conduit_slack.testing.fake import FakeMessage, FakeSlack

__all__ = ["SlackPlatform"]


class SlackPlatform:
    """Drives `fake` as a user would; see the module docstring."""

    def __init__(self, fake: FakeSlack, *, patience: float = 10.0) -> None:
        self.fake = fake
        self.patience = patience
        self.roots: dict[str, FakeMessage] = {}
        self._by_id: dict[str, FakeMessage] = {}
        self._read: dict[str, int] = {}
        self._connections = 0

    @classmethod
    async def start(cls) -> SlackPlatform:
        """A started fake Slack behind a platform."""
        return cls(await FakeSlack().start())

    @staticmethod
    def channel(conversation: str) -> str:
        """The Slack channel of a kit conversation."""
        return "C" + conversation.upper().replace("-", "")

    async def wait_until_ready(self) -> None:
        """Until the conduit has (re)opened its socket since the last call."""
        self._connections += 1
        await self.fake.wait_connected(self._connections, within=self.patience)

    async def post_user_message(self, conversation: str, text: str, message_id: str) -> None:
        """An @mention (the thread root, or a reply in it); a repeated id redelivers it."""
        known = self._by_id.get(message_id)
        if known is not None:
            event = self.fake.message_event(known, event_type="app_mention")
            await self.fake.deliver(self.fake.callback(event), retry_attempt=1)
            return
        root = self.roots.get(conversation)
        message = await self.fake.user_says(
            self.channel(conversation),
            text,
            thread_ts=root.ts if root is not None else "",
            events=("app_mention",),
        )
        self.roots.setdefault(conversation, message)
        self._by_id[message_id] = message

    def bridge(self, conversation: str) -> str:
        """A thread started by a person (no mention) for the kit's bridging check; its
        key, the link's value. The kit's messages in it are replies."""
        root = self.fake.add_message(self.channel(conversation), "a bridge", user="UALICE")
        self.roots[conversation] = root
        return f"-:{self.fake.team}:{root.channel}:{root.ts}"

    async def wait_for_reply(self, conversation: str) -> str:
        """The next finished answer, or relayed copy, in the conversation's thread."""
        channel = self.channel(conversation)
        seen = self._read.get(conversation, 0)

        def answers() -> list[str]:
            root = self.roots.get(conversation)
            if root is None:
                return []
            copies = [
                m.text
                for m in self.fake.bot_messages(channel, root.ts)
                if (m.metadata or {}).get("event_type") == RELAY_EVENT
            ]
            return self.fake.answers(channel, root.ts) + copies

        await self.fake.wait_until(lambda: len(answers()) > seen, within=self.patience)
        self._read[conversation] = seen + 1
        return answers()[seen]

    async def interrupt(self, conversation: str) -> None:
        """Delete the conversation's latest message (its answer is being written)."""
        root = self.roots[conversation]
        latest = self.fake.thread(self.channel(conversation), root.ts)
        mine = [m for m in latest if not m.bot_id]
        await self.fake.deliver(self.fake.callback(self.fake.delete_event(mine[-1])))

    async def close(self) -> None:
        """Stop the fake."""
        await self.fake.close()
