"""Links on the bus (issue 29): a linked namespace reaches a thread by its own subjects.

Two raw nats-py clients speak protocol.md as conduits `alpha` (the thread's home) and
`beta` (linked by an operator through `P.admin.links.add`); the core is real, on a
real nats-server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from ore_core.bus.server.embedded import EmbeddedNatsServer
from ore_core.bus.service import CoreService
from tests.bus.conftest import (
    TIMEOUT,
    CoreFactory,
    eventually,
    publish,
    unpack,
    user_message,
    wait_for,
)

THREAD = "shared-1"
BETA = {"namespace": "beta", "key": "beta.channel", "value": "C-42"}


async def call(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=TIMEOUT)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def link(
    nc: Client, thread: str = THREAD, endpoint: dict[str, str] = BETA, **extra: Any
) -> dict[str, Any]:
    return await call(nc, "ore.admin.links.add", {"thread": thread, "endpoint": endpoint, **extra})


@dataclass
class Endpoint:
    """What one namespace's subscriber got on `ore.out.NS.T`, in arrival order."""

    messages: list[Msg] = field(default_factory=list)

    async def receive(self, msg: Msg) -> None:
        self.messages.append(msg)

    def events(self) -> list[dict[str, Any]]:
        return [event for m in self.messages for event in unpack(m.data)]

    def stored(self) -> list[int]:
        """The Nats-Sequence of every stored batch received, in arrival order."""
        return [
            int(m.headers["Nats-Sequence"])
            for m in self.messages
            if m.headers and "Nats-Sequence" in m.headers
        ]

    def done(self) -> int:
        return sum(1 for e in self.events() if e["kind"] == "lifecycle" and e["phase"] == "done")

    def user_turns(self) -> list[str]:
        """The text of every user turn_complete received (stored batches only)."""
        return [
            e["turn"]["artifacts"][0]["data"]["content"]
            for m in self.messages
            if m.headers and "Nats-Sequence" in m.headers
            for e in unpack(m.data)
            if e["kind"] == "turn_complete" and e["turn"]["role"] == "user"
        ]


async def watch(nc: Client, namespace: str, thread: str = THREAD) -> Endpoint:
    endpoint = Endpoint()
    await nc.subscribe(f"ore.out.{namespace}.{thread}", cb=endpoint.receive)
    await nc.flush()
    return endpoint


async def start_shared(start_core: CoreFactory, nc: Client) -> tuple[CoreService, Endpoint]:
    """A core, and THREAD made by alpha (one turn answered); returns alpha's view."""
    core = await start_core()
    alpha = await watch(nc, "alpha")
    await publish(nc, THREAD, user_message("hello", "a-0", "alpha"), namespace="alpha")
    await wait_for(lambda: alpha.done() == 1)
    return core, alpha


async def stored_sequences(nc: Client, subject: str) -> list[int]:
    js = nc.jetstream()
    sequences = []
    after = 0
    while True:
        try:
            msg = await js.get_msg("ORE_EVENTS", seq=after + 1, subject=subject, next=True)
        except NotFoundError:  # past the last
            return sequences
        assert msg.seq is not None
        sequences.append(msg.seq)
        after = msg.seq


# -- the admin methods --------------------------------------------------------------


async def test_an_operator_adds_lists_and_removes_a_link(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    added = await link(nc, answer="none")
    assert (added["thread"], added["home"], added["answer"]) == (THREAD, "alpha", "none")
    assert added["endpoints"] == [{**BETA, "direction": "inout"}]
    listed = await call(nc, "ore.admin.links.list", {"namespace": "beta"})
    assert [entry["thread"] for entry in listed["links"]] == [THREAD]
    found = await call(nc, "ore.admin.links.lookup", {"endpoint": BETA})
    assert found == {"thread": THREAD}
    removed = await call(nc, "ore.admin.links.remove", {"endpoint": BETA})
    assert removed == {"thread": THREAD, "removed": True}
    assert (await call(nc, "ore.admin.links.list", {}))["links"] == []


async def test_a_link_mirrors_its_settings_into_the_thread_s_metadata(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc, answer="all", label="{name} via {conduit}")
    metadata = (await call(nc, "ore.admin.threads.get", {"id": THREAD}))["metadata"]
    assert metadata["ore.gateway.answer"] == "all"
    assert metadata["ore.gateway.label"] == "{name} via {conduit}"
    await call(nc, "ore.admin.links.remove", {"endpoint": BETA})
    metadata = (await call(nc, "ore.admin.threads.get", {"id": THREAD}))["metadata"]
    assert "ore.gateway.answer" not in metadata


BAD_ADDS: dict[str, tuple[dict[str, Any], str, str]] = {
    "a key outside the namespace": (
        {"thread": THREAD, "endpoint": {**BETA, "key": "alpha.channel"}},
        "bad_request",
        "outside the namespace",
    ),
    "an invalid namespace": (
        {"thread": THREAD, "endpoint": {**BETA, "namespace": "Beta!"}},
        "bad_request",
        "invalid conduit namespace",
    ),
    "an empty value": (
        {"thread": THREAD, "endpoint": {**BETA, "value": ""}},
        "bad_request",
        "value must have",
    ),
    "an unknown thread": (
        {"thread": "no-such-thread", "endpoint": BETA},
        "not_found",
        "no-such-thread",
    ),
    "a path-like thread id": (
        {"thread": "../x", "endpoint": BETA},
        "bad_request",
        "invalid thread id",
    ),
    "an unknown field": (
        {"thread": THREAD, "endpoint": BETA, "loop": True},
        "bad_request",
        "loop",
    ),
}


@pytest.mark.parametrize(("body", "code", "words"), BAD_ADDS.values(), ids=BAD_ADDS.keys())
async def test_a_bad_link_is_refused_and_nothing_is_written(
    start_core: CoreFactory, ore_nats_client: Client, body: dict[str, Any], code: str, words: str
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    answer = await call(nc, "ore.admin.links.add", body)
    assert answer["error"]["code"] == code
    assert words in answer["error"]["message"]
    assert (await call(nc, "ore.admin.links.list", {}))["links"] == []


async def test_an_endpoint_linked_to_another_thread_is_a_conflict(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await publish(nc, "other-1", user_message("hi", "a-9", "alpha"), namespace="alpha")
    await link(nc)
    answer = await link(nc, thread="other-1")
    assert answer["error"]["code"] == "conflict"
    assert f"linked to thread {THREAD}" in answer["error"]["message"]


async def test_removing_an_unlinked_endpoint_is_not_found(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core()
    answer = await call(ore_nats_client, "ore.admin.links.remove", {"endpoint": BETA})
    assert answer["error"]["code"] == "not_found"


# -- the conduit side --------------------------------------------------------------


async def test_a_linked_namespace_s_message_is_answered_on_both_endpoints(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc)
    await publish(nc, THREAD, user_message("from beta", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: alpha.done() == 2 and beta.done() == 1)
    assert alpha.user_turns() == ["hello", "from beta"]
    assert beta.user_turns() == ["from beta"]
    assert beta.stored() == alpha.stored()[1:]  # the same batches, the same sequences
    user = next(
        e for e in beta.events() if e["kind"] == "turn_complete" and e["turn"]["role"] == "user"
    )
    assert user["context"]["provenance"] == "beta"  # provenance from the subject


async def test_the_copy_carries_the_previous_sequence_of_the_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc)
    await publish(nc, THREAD, user_message("from beta", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: beta.done() == 1)
    copy = beta.messages[-1]
    assert copy.headers is not None
    assert int(copy.headers["Nats-Sequence"]) == alpha.stored()[-1]
    assert int(copy.headers["Nats-Last-Sequence"]) == alpha.stored()[-2]
    assert copy.headers["Ore-Kind"] == "batch"


async def test_an_unlinked_namespace_is_answered_like_an_unknown_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    gamma = await watch(nc, "gamma")
    await publish(nc, THREAD, user_message("let me in", "g-1", "gamma"), namespace="gamma")
    await wait_for(lambda: gamma.done() == 1)
    (error,) = [e for e in gamma.events() if e["kind"] == "error"]
    assert error["code"] == "unknown_thread"
    assert error["message"].startswith(f"thread {THREAD} does not exist in namespace gamma")


async def test_an_out_only_endpoint_cannot_send_into_the_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc, direction="out")
    await publish(nc, THREAD, user_message("muted", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: beta.done() == 1)
    assert [e["code"] for e in beta.events() if e["kind"] == "error"] == ["unknown_thread"]
    assert alpha.user_turns() == ["hello"]


async def test_an_in_only_endpoint_gets_no_copies(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc, direction="in")
    await publish(nc, THREAD, user_message("one way", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: alpha.done() == 2)
    await nc.flush()
    assert beta.stored() == []


async def test_the_linked_endpoint_s_lookup_answers_the_shared_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    body = {"key": BETA["key"], "value": BETA["value"]}
    assert await call(nc, "ore.api.beta.threads.lookup", body) == {
        "id": THREAD,
        "created": False,
    }


async def test_a_linked_namespace_reads_the_thread_and_its_stored_events(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    unlinked = await call(nc, "ore.api.beta.threads.get", {"id": THREAD})
    assert unlinked["error"]["code"] == "not_found"
    await link(nc)
    got = await call(nc, "ore.api.beta.threads.get", {"id": THREAD})
    assert (got["id"], got["namespace"]) == (THREAD, "alpha")
    turns = await call(nc, "ore.api.beta.threads.turns", {"id": THREAD})
    assert [t["role"] for t in turns["turns"]] == ["user", "assistant"]
    read = await call(nc, "ore.api.beta.events.read", {"thread": THREAD})
    assert [entry["sequence"] for entry in read["events"]] == alpha.stored()
    last = await call(nc, "ore.api.beta.events.read", {"thread": THREAD, "limit": 0})
    assert last["last"] == alpha.stored()[-1]


async def test_a_linked_namespace_is_shown_its_own_endpoint_key_and_no_other(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    beta = (await call(nc, "ore.api.beta.threads.get", {"id": THREAD}))["metadata"]
    assert beta[BETA["key"]] == BETA["value"]
    alpha = (await call(nc, "ore.api.alpha.threads.get", {"id": THREAD}))["metadata"]
    stored = (await call(nc, "ore.admin.threads.get", {"id": THREAD}))["metadata"]
    assert BETA["key"] not in alpha
    assert BETA["key"] not in stored


async def test_a_worker_taking_the_thread_over_sends_its_last_batch_to_linked_namespaces(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    core, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc)  # its settings are stored in the thread: a batch of `properties`
    await wait_for(lambda: len(alpha.stored()) == 2 and beta.stored() == alpha.stored()[1:])
    await core.stop(grace=0)
    await start_core()  # attaches the thread afresh at its next message: `prime`
    await publish(nc, THREAD, user_message("again", "a-1", "alpha"), namespace="alpha")
    await wait_for(lambda: alpha.done() == 2 and len(beta.stored()) == 3)
    last, new = alpha.stored()[1:]
    assert beta.stored() == [last, last, new]  # the last batch again, then the new one


# -- counting --------------------------------------------------------------------

RELAYED = 40


def counts(sent: list[str], received: list[str]) -> dict[str, int]:
    """Lost, doubled and out-of-order messages of `sent` (in order) in `received`."""
    positions = [received.index(text) for text in sent if text in received]
    return {
        "lost": sum(1 for text in sent if text not in received),
        "doubled": sum(received.count(text) - 1 for text in sent if received.count(text) > 1),
        "out_of_order": sum(1 for a, b in itertools.pairwise(positions) if b < a),
    }


async def test_two_linked_namespaces_each_see_every_message_once_in_the_ledger_s_order(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc)
    sent = {"alpha": [f"a{n}" for n in range(RELAYED)], "beta": [f"b{n}" for n in range(RELAYED)]}

    async def send(namespace: str) -> None:
        for n, text in enumerate(sent[namespace]):
            await publish(
                nc,
                THREAD,
                user_message(text, f"{namespace}-{n}", namespace),
                namespace=namespace,
            )

    await asyncio.gather(send("alpha"), send("beta"))
    total = 2 * RELAYED
    await wait_for(lambda: alpha.done() == total + 1 and beta.done() == total)
    ledger = [
        t["artifacts"][0]["data"]["content"]
        for t in (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
        if t["role"] == "user"
    ][1:]
    stored = await stored_sequences(nc, f"ore.ev.alpha.{THREAD}")
    for name, endpoint in (("alpha", alpha), ("beta", beta)):
        received = endpoint.user_turns()[-total:]
        assert received == ledger, name  # the ledger's order, on every endpoint
        for origin in ("alpha", "beta"):
            assert counts(sent[origin], received) == {
                "lost": 0,
                "doubled": 0,
                "out_of_order": 0,
            }, (name, origin)
    assert alpha.stored() == stored
    assert beta.stored() == stored[1:]  # every batch since the link, the link's own first


# -- what a relayed user turn records ---------------------------------------------


def relayed(text: str, msg_id: str, **fields: Any) -> dict[str, Any]:
    message = user_message(text, msg_id, "beta")
    context = fields.pop("context", {})
    message["context"] = {**message["context"], **context}
    return {**message, **fields}


async def last_user_turn(nc: Client) -> dict[str, Any]:
    turns = (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
    user: dict[str, Any] = [t for t in turns if t["role"] == "user"][-1]
    return user


async def test_the_sender_s_display_name_is_recorded_on_the_user_turn(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    await link(nc)
    message = relayed("hi all", "b-1", context={"user_name": "Ana María"})
    await publish(nc, THREAD, message, namespace="beta")
    await wait_for(lambda: alpha.done() == 2)
    turn = await last_user_turn(nc)
    assert turn["metadata"] == {"event_id": "b-1", "sender": "Ana María"}
    shown = [e for e in alpha.events() if e.get("turn", {}).get("id") == turn["id"]]
    assert shown[0]["context"]["user_name"] == "Ana María"


async def test_edit_of_and_reply_to_are_recorded_on_the_user_turn(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    await link(nc)
    first = await last_user_turn(nc)
    message = relayed("fixed", "b-2", metadata={"edit_of": first["id"], "reply_to": first["id"]})
    await publish(nc, THREAD, message, namespace="beta")
    await wait_for(lambda: alpha.done() == 2)
    metadata = (await last_user_turn(nc))["metadata"]
    assert (metadata["edit_of"], metadata["reply_to"]) == (first["id"], first["id"])


async def test_an_unknown_message_metadata_key_is_refused_with_the_keys_it_may_name(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    await publish(
        nc,
        THREAD,
        {**user_message("x", "a-2", "alpha"), "metadata": {"pin": "1"}},
        namespace="alpha",
    )
    await wait_for(lambda: alpha.done() == 2)
    (error,) = [e for e in alpha.events() if e["kind"] == "error"]
    assert "edit_of and reply_to" in error["message"]


async def test_a_relay_without_answers_records_the_message_and_calls_no_model(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    await link(nc, answer="none")
    await publish(nc, THREAD, relayed("just people", "b-1"), namespace="beta")
    await wait_for(lambda: alpha.done() == 2 and beta.done() == 1)
    turns = (await call(nc, "ore.admin.threads.turns", {"id": THREAD}))["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    batch = unpack(beta.messages[-1].data)
    assert [e["kind"] for e in batch] == ["turn_complete", "lifecycle"]


async def test_a_namespace_wide_read_merges_its_own_and_its_linked_threads_in_order(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    _, alpha = await start_shared(start_core, nc)
    own = await watch(nc, "beta", "beta-own")
    await publish(nc, "beta-own", user_message("mine", "b-0", "beta"), namespace="beta")
    await wait_for(lambda: own.done() == 1)
    await link(nc)
    await publish(nc, THREAD, user_message("shared", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: alpha.done() == 2)
    read = await call(nc, "ore.api.beta.events.read", {})
    entries = [(entry["thread"], entry["sequence"]) for entry in read["events"]]
    expected = sorted(
        [(THREAD, sequence) for sequence in alpha.stored()]
        + [("beta-own", sequence) for sequence in own.stored()],
        key=lambda entry: entry[1],
    )
    assert entries == expected
    paged = await call(nc, "ore.api.beta.events.read", {"limit": 2})
    rest = await call(nc, "ore.api.beta.events.read", {"after": paged["next"]})
    assert [(e["thread"], e["sequence"]) for e in paged["events"] + rest["events"]] == expected
    last = await call(nc, "ore.api.beta.events.read", {"limit": 0})
    assert last["last"] == expected[-1][1]


async def test_a_namespace_wide_read_of_an_unlinked_namespace_has_no_other_thread(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    read = await call(nc, "ore.api.gamma.events.read", {})
    assert read["events"] == []


async def test_a_conduit_cannot_change_the_settings_mirrored_from_the_links(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc, answer="all")
    for namespace in ("alpha", "beta"):  # the home and the linked endpoint alike
        body = {"id": THREAD, "key": "ore.gateway.answer", "value": "none"}
        answer = await call(nc, f"ore.api.{namespace}.threads.meta.set", body)
        assert answer["error"]["code"] == "bad_request"
        assert "set by the core from the thread's links" in answer["error"]["message"]
    metadata = (await call(nc, "ore.admin.threads.get", {"id": THREAD}))["metadata"]
    assert metadata["ore.gateway.answer"] == "all"


async def test_links_are_followed_across_a_nats_restart(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_server: EmbeddedNatsServer
) -> None:
    nc = ore_nats_client
    core, alpha = await start_shared(start_core, nc)
    beta = await watch(nc, "beta")
    gamma = await watch(nc, "gamma")
    await link(nc)
    await ore_nats_server.arestart()
    await wait_for(lambda: core.ready and nc.is_connected)

    async def answering() -> bool:  # the control API is subscribed again
        try:
            await nc.request("ore.admin.health", b"{}", timeout=1)
        except (NatsError, TimeoutError):
            return False
        return True

    await eventually(answering)
    gamma_room = {"namespace": "gamma", "key": "gamma.room", "value": "g"}
    await link(nc, endpoint=gamma_room, direction="out")
    await wait_for(lambda: "gamma" in core.links.copies(THREAD))  # the watch goes on
    await publish(nc, THREAD, user_message("after", "b-1", "beta"), namespace="beta")
    await wait_for(lambda: alpha.done() == 2 and beta.done() == 1 and gamma.done() == 1)
    assert beta.user_turns()[-1] == gamma.user_turns()[-1] == "after"


async def test_deleting_a_thread_removes_its_links_so_its_id_reused_is_unreachable(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    nc = ore_nats_client
    await start_shared(start_core, nc)
    await link(nc)
    assert (await call(nc, "ore.admin.threads.delete", {"id": THREAD}))["deleted"] is True
    assert (await call(nc, "ore.admin.links.list", {}))["links"] == []
    gamma = await watch(nc, "gamma")
    await publish(nc, THREAD, user_message("mine now", "g-1", "gamma"), namespace="gamma")
    await wait_for(lambda: gamma.done() == 1)  # the id, reused by another namespace
    answer = await call(nc, "ore.api.beta.threads.get", {"id": THREAD})
    assert answer["error"]["code"] == "not_found"
    lookup = {"key": BETA["key"], "value": BETA["value"]}
    assert (await call(nc, "ore.api.beta.threads.lookup", lookup))["id"] != THREAD
