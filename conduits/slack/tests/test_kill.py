"""The Slack conduit as a process, killed (kill -9) again and again under load.

What a user counts: every Slack message gets one finished answer, in its thread, in
order, none twice, and what the bot's messages show is exactly the answers. The core
(a real CoreService on the test's nats-server) and the fake Slack keep running; only
the conduit process (`ore conduit slack`) dies and is started again.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ore_conduit_slack.testing import FakeSlack
from ore_core import Manager
from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.server.streams import BusConfig
from ore_core.bus.service import CoreService
from ore_core.session.stores.memory import MemoryStore
from ore_core.testing.conduit_process import ConduitProcess
from ore_core.testing.processors import SlowEcho

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHANNEL = "CGENERAL"
THREADS = 12
MESSAGES = 5  # per Slack thread, each sent once the previous one is answered
KILLS = 10
ANSWER_PAUSE = 0.25  # between an answer's deltas in the fault test: a second per answer
ANSWER_PATIENCE = 150.0  # seconds the whole conversation may take (bounds a hang: ten
# restarts of the conduit on a loaded machine took more than the 90 s once allowed)


def conduit_process(
    nats_url: str, fake: FakeSlack, log: Path, streaming: str = "auto"
) -> ConduitProcess:
    """`ore conduit slack` against the fake Slack, flushing small pieces often (the edit
    budget is raised: this is about faults, not Slack's rate limits). It loads only its
    own plugin, not the venv's test plugins: each of the many starts imports less."""
    settings = fake.conduit_settings(
        flush_interval=0.05, flush_chars=20, streaming=streaming, updates_per_minute=6000
    )
    env = {"ORE_LOG_LEVEL": "INFO", "ORE_LOAD_PLUGINS": "ore-conduit-slack"}
    return ConduitProcess("slack", nats_url, log, settings, env=env)


def new_core(nats_url: str, store: MemoryStore, pause: float = 0.02) -> CoreService:
    """A core answering in four deltas `pause` seconds apart (see `SlowEcho`)."""
    return CoreService(
        Manager(store, SlowEcho(pause, strip="<@UBOT> ")),
        servers=[nats_url],
        config=BusConfig(partitions=2),
        reconnect_wait=0.05,
    )


def expected(text: str) -> str:
    return SlowEcho.answer(text)


@dataclass
class Tally:
    sent: list[tuple[str, str]] = field(default_factory=list)  # (root ts, text)
    unanswered: list[str] = field(default_factory=list)
    answered: int = 0

    @property
    def waiting(self) -> int:
        """Messages sent and not answered yet (a fault now lands mid-answer)."""
        return len(self.sent) - self.answered - len(self.unanswered)


async def converse(
    fake: FakeSlack,
    index: int,
    tally: Tally,
    roots: list[str],
    deadline: float,
    think: float = 0.0,
) -> None:
    """One Slack thread: a root message, then replies, each after the previous answer
    and a pause of 0 to `2 * think` seconds (a user reading it)."""
    loop = asyncio.get_running_loop()
    pauses = random.Random(index)
    root = ""
    for number in range(MESSAGES):
        if number:
            await asyncio.sleep(pauses.uniform(0, 2 * think))
        text = f"t{index} m{number}"
        message = await fake.user_says(CHANNEL, text, thread_ts=root)
        if not root:
            root = message.ts
            roots.append(root)
        tally.sent.append((root, text))
        try:
            await fake.wait_until(
                lambda root=root, number=number: len(fake.answers(CHANNEL, root)) > number,
                max(0.1, deadline - loop.time()),
            )
        except TimeoutError:
            tally.unanswered.append(text)
        else:
            tally.answered += 1


def leftovers(fake: FakeSlack, root: str) -> list[str]:
    """What the bot's messages in a thread that belong to no finished answer show: a
    message (or stream) left half-written beside the answers."""
    messages = fake.bot_messages(CHANNEL, root)
    payloads = [(m.metadata or {}).get("event_payload") or {} for m in messages]
    finished = {p.get("answer") for p in payloads if p.get("last")}
    return [
        m.text for m, p in zip(messages, payloads, strict=True) if p.get("answer") not in finished
    ]


def audit(fake: FakeSlack, tally: Tally, label: str) -> tuple[int, int, int, int, list[object]]:
    """(lost, doubled, threads out of order, messages left half-written, details) of
    every Slack thread of `tally`."""
    by_root: dict[str, list[str]] = {}
    for root, text in tally.sent:
        by_root.setdefault(root, []).append(expected(text))
    lost = doubled = disorder = left = 0
    details: list[object] = []
    for root, wanted in by_root.items():
        left += len(leftovers(fake, root))
        got = fake.answers(CHANNEL, root)
        shown = fake.rendered_thread(CHANNEL, root)  # every bot message, finished or not
        if shown != got:  # a message left half-written, or an answer split in two
            got = [answer for answer in got if answer in shown]
        lost += sum(1 for answer in wanted if answer not in got)
        doubled += sum(got.count(answer) - 1 for answer in set(got))
        seen = [answer for answer in got if answer in wanted]
        if seen != sorted(set(seen), key=wanted.index):
            disorder += 1
        if got != wanted or leftovers(fake, root):
            details.append((root, wanted, got, fake.rendered_thread(CHANNEL, root)))
    print(
        f"\n{label}: sent {len(tally.sent)}, lost {lost}, doubled {doubled}, "
        f"threads out of order {disorder}, left half-written {left}, "
        f"unanswered {tally.unanswered}"
    )
    for detail in details[:5]:
        print(detail)
    return lost, doubled, disorder, left, details


async def test_messages_taken_while_the_core_is_away_survive_a_kill_of_the_conduit(
    ore_nats_url: str, tmp_path: Path
) -> None:
    """Slack never sends an acknowledged event again: the conduit must not lose one it
    acknowledged and had not handed to the core yet (the core was away, a deploy
    restarting both, say) when it dies."""
    store = MemoryStore()

    core = new_core(ore_nats_url, store)
    await core.start()
    fake = await FakeSlack().start()
    conduit = conduit_process(ore_nats_url, fake, tmp_path / "conduit.log")
    conduit.start()
    try:
        await fake.wait_connected(1, 30)
        warm = await fake.user_says(CHANNEL, "warm up")
        await fake.wait_until(lambda: len(fake.answers(CHANNEL, warm.ts)) == 1, 30)
        await core.stop(grace=0)

        acked = len(fake.acks)
        roots = [await fake.user_says(CHANNEL, f"while away {i}") for i in range(5)]
        await fake.wait_until(lambda: len(fake.acks) >= acked + 2 * len(roots), 30)
        conduit.kill()
        conduit.start()
        await fake.wait_connected(2, 30)
        core = new_core(ore_nats_url, store)
        await core.start()

        def answered() -> int:
            return sum(len(fake.answers(CHANNEL, root.ts)) for root in roots)

        try:
            await fake.wait_until(lambda: answered() == len(roots), 60)
        except TimeoutError:
            pass
        got = {root.ts: fake.answers(CHANNEL, root.ts) for root in roots}
    finally:
        await conduit.astop()
        await fake.close()
        await core.stop(grace=0)
        await store.close()
    print(f"\ncore away, conduit killed: {got}")
    assert got == {root.ts: [expected(f"while away {i}")] for i, root in enumerate(roots)}


@pytest.mark.timeout(ANSWER_PATIENCE + 60)
@pytest.mark.parametrize(
    ("kinds", "streaming", "seed"),
    [(("conduit",), "edit", 5), (("conduit", "core", "nats"), "auto", 11)],
    ids=["conduit killed, edit mode", "conduit, core and nats (streams)"],
)
async def test_faults_at_random_moments_of_a_load_lose_and_double_nothing(
    kinds: tuple[str, ...],
    streaming: str,
    seed: int,
    ore_nats_server: EmbeddedNatsServer,
    tmp_path: Path,
) -> None:
    """Ten faults at random moments of a load, each of `kinds` at least once: the
    conduit killed (kill -9) and started again, the core stopped and started again a
    moment later, or the NATS server restarted. `KILL_SEED=N` picks another run."""
    url = ore_nats_server.url
    store = MemoryStore()
    core = new_core(url, store, ANSWER_PAUSE)
    await core.start()
    fake = await FakeSlack().start()
    conduit = conduit_process(url, fake, tmp_path / "conduit.log", streaming)
    conduit.start()
    rng = random.Random(int(os.environ.get("KILL_SEED", str(seed))))
    faults: list[str] = []
    busy: list[bool] = []  # per fault: whether an answer was unfinished when it struck
    try:
        await fake.wait_connected(1, 30)
        tally = Tally()
        roots: list[str] = []
        deadline = asyncio.get_running_loop().time() + ANSWER_PATIENCE + 30
        plan = rng.sample(kinds, len(kinds))
        plan += [rng.choice(kinds) for _ in range(KILLS - len(kinds))]
        gaps = [rng.uniform(0.2, 1.2) for _ in plan]
        # The users pause between messages so that the load lasts as long as the faults
        # (each fault and its recovery take about a second more than its gap).
        think = (sum(gaps) + len(plan)) / (MESSAGES - 1)
        load = asyncio.gather(
            *(converse(fake, i, tally, roots, deadline, think) for i in range(THREADS))
        )
        for fault, gap in zip(plan, gaps, strict=True):
            await asyncio.sleep(gap)
            busy.append(tally.waiting > 0 or any(leftovers(fake, root) for root in roots))
            faults.append(fault)
            if fault == "conduit":
                connections = fake.connections
                conduit.kill()
                conduit.start()
                await fake.wait_connected(connections + 1, 30)
            elif fault == "core":
                await core.stop(grace=0)
                await asyncio.sleep(rng.uniform(0.0, 1.0))
                core = new_core(url, store, ANSWER_PAUSE)
                await core.start()
            else:
                await ore_nats_server.arestart()
        await load
    finally:
        await conduit.astop()
        await fake.close()
        await core.stop(grace=0)
        await store.close()

    lost, doubled, disorder, left, details = audit(fake, tally, f"faults {faults}")
    assert set(faults) == set(kinds)
    assert sum(busy) >= KILLS // 2, f"most faults struck an idle conduit: {busy}"
    assert conduit.starts == faults.count("conduit") + 1
    assert (lost, doubled, disorder, left) == (0, 0, 0, 0), details[:3]
    assert len(tally.sent) == THREADS * MESSAGES
