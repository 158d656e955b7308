"""Links on the bus (issue 29): a linked namespace reaches a thread by its own subjects.

Two raw nats-py clients speak protocol.md as conduits `alpha` (the thread's home) and
`beta` (linked by an operator through `P.admin.links.add`); the core is real, on a
real nats-server. The thread and its link are set up once, in `tests/bridge/linked.py`
(the `shared` and `linked` fixtures).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.bridge.linked import BETA, THREAD, Linked, LinkedThread, call, link, send
from tests.bus import raw
from tests.bus.conftest import CoreFactory


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


async def test_an_operator_adds_lists_and_removes_a_link(shared: LinkedThread) -> None:
    added = await shared.link(answer="none")
    assert (added["thread"], added["home"], added["answer"]) == (THREAD, "alpha", "none")
    assert added["endpoints"] == [{**BETA, "direction": "inout"}]
    listed = await shared.call("ore.admin.links.list", {"namespace": "beta"})
    assert [entry["thread"] for entry in listed["links"]] == [THREAD]
    found = await shared.call("ore.admin.links.lookup", {"endpoint": BETA})
    assert found == {"thread": THREAD}
    removed = await shared.call("ore.admin.links.remove", {"endpoint": BETA})
    assert removed == {"thread": THREAD, "removed": True}
    assert (await shared.call("ore.admin.links.list", {}))["links"] == []


async def test_a_link_mirrors_its_settings_into_the_thread_s_metadata(
    shared: LinkedThread,
) -> None:
    await shared.link(answer="all", label="{name} via {conduit}")
    metadata = await shared.metadata()
    assert metadata["ore.gateway.answer"] == "all"
    assert metadata["ore.gateway.label"] == "{name} via {conduit}"
    await shared.call("ore.admin.links.remove", {"endpoint": BETA})
    assert "ore.gateway.answer" not in await shared.metadata()


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
    shared: LinkedThread, body: dict[str, Any], code: str, words: str
) -> None:
    answer = await shared.call("ore.admin.links.add", body)
    assert answer["error"]["code"] == code
    assert words in answer["error"]["message"]
    assert (await shared.call("ore.admin.links.list", {}))["links"] == []


async def test_an_endpoint_linked_to_another_thread_is_a_conflict(shared: LinkedThread) -> None:
    await send(shared.nc, "alpha", "hi", "a-9", thread="other-1")
    await shared.link()
    answer = await link(shared.nc, thread="other-1")
    assert answer["error"]["code"] == "conflict"
    assert f"linked to thread {THREAD}" in answer["error"]["message"]


async def test_removing_an_unlinked_endpoint_is_not_found(
    start_core: CoreFactory, ore_nats_client: Client
) -> None:
    await start_core()
    answer = await call(ore_nats_client, "ore.admin.links.remove", {"endpoint": BETA})
    assert answer["error"]["code"] == "not_found"


# -- the conduit side --------------------------------------------------------------


async def test_a_linked_namespace_s_message_is_answered_on_both_endpoints(linked: Linked) -> None:
    alpha, beta = linked.alpha, linked.beta
    await linked.send("beta", "from beta", "b-1")
    await raw.wait_for(lambda: alpha.done() == 2 and beta.done() == 1)
    assert alpha.user_turns() == ["hello", "from beta"]
    assert beta.user_turns() == ["from beta"]
    assert beta.stored() == alpha.stored()[1:]  # the same batches, the same sequences
    user = next(e for e in beta.of_kind("turn_complete") if e["turn"]["role"] == "user")
    assert user["context"]["provenance"] == "beta"  # provenance from the subject


async def test_the_copy_carries_the_previous_sequence_of_the_thread(linked: Linked) -> None:
    await linked.send("beta", "from beta", "b-1")
    await raw.wait_for(lambda: linked.beta.done() == 1)
    copy = linked.beta.messages[-1]
    assert copy.headers is not None
    assert int(copy.headers["Nats-Sequence"]) == linked.alpha.stored()[-1]
    assert int(copy.headers["Nats-Last-Sequence"]) == linked.alpha.stored()[-2]
    assert copy.headers["Ore-Kind"] == "batch"


async def test_an_unlinked_namespace_is_answered_like_an_unknown_thread(linked: Linked) -> None:
    gamma = await linked.watch("gamma")
    await linked.send("gamma", "let me in", "g-1")
    await raw.wait_for(lambda: gamma.done() == 1)
    (error,) = gamma.of_kind("error")
    assert error["code"] == "unknown_thread"
    assert error["message"].startswith(f"thread {THREAD} does not exist in namespace gamma")


async def test_an_out_only_endpoint_cannot_send_into_the_thread(shared: LinkedThread) -> None:
    beta = await shared.watch("beta")
    await shared.link(direction="out")
    await shared.send("beta", "muted", "b-1")
    await raw.wait_for(lambda: beta.done() == 1)
    assert [e["code"] for e in beta.of_kind("error")] == ["unknown_thread"]
    assert shared.alpha.user_turns() == ["hello"]


async def test_an_in_only_endpoint_gets_no_copies(shared: LinkedThread) -> None:
    beta = await shared.watch("beta")
    await shared.link(direction="in")
    await shared.send("beta", "one way", "b-1")
    await raw.wait_for(lambda: shared.alpha.done() == 2)
    await shared.nc.flush()
    assert beta.stored() == []


async def test_the_linked_endpoint_s_lookup_answers_the_shared_thread(linked: Linked) -> None:
    body = {"key": BETA["key"], "value": BETA["value"]}
    found = await linked.call("ore.api.beta.threads.lookup", body)
    assert found == {"id": THREAD, "created": False}


async def test_a_linked_namespace_reads_the_thread_and_its_stored_events(
    shared: LinkedThread,
) -> None:
    unlinked = await shared.call("ore.api.beta.threads.get", {"id": THREAD})
    assert unlinked["error"]["code"] == "not_found"
    await shared.link()
    got = await shared.call("ore.api.beta.threads.get", {"id": THREAD})
    assert (got["id"], got["namespace"]) == (THREAD, "alpha")
    turns = await shared.call("ore.api.beta.threads.turns", {"id": THREAD})
    assert [t["role"] for t in turns["turns"]] == ["user", "assistant"]
    read = await shared.call("ore.api.beta.events.read", {"thread": THREAD})
    assert [entry["sequence"] for entry in read["events"]] == shared.alpha.stored()
    last = await shared.call("ore.api.beta.events.read", {"thread": THREAD, "limit": 0})
    assert last["last"] == shared.alpha.stored()[-1]


async def test_a_linked_namespace_is_shown_its_own_endpoint_key_and_no_other(
    linked: Linked,
) -> None:
    assert (await linked.metadata("beta"))[BETA["key"]] == BETA["value"]
    assert BETA["key"] not in await linked.metadata("alpha")
    assert BETA["key"] not in await linked.metadata()


async def test_a_worker_taking_the_thread_over_sends_its_last_batch_to_linked_namespaces(
    linked: Linked, start_core: CoreFactory
) -> None:
    alpha, beta = linked.alpha, linked.beta
    # the link's settings are stored in the thread: a batch of `properties`
    await raw.wait_for(lambda: len(alpha.stored()) == 2 and beta.stored() == alpha.stored()[1:])
    await linked.core.stop(grace=0)
    await start_core()  # attaches the thread afresh at its next message: `prime`
    await linked.send("alpha", "again", "a-1")
    await raw.wait_for(lambda: alpha.done() == 2 and len(beta.stored()) == 3)
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
    linked: Linked,
) -> None:
    alpha, beta = linked.alpha, linked.beta
    sent = {"alpha": [f"a{n}" for n in range(RELAYED)], "beta": [f"b{n}" for n in range(RELAYED)]}

    async def send_all(namespace: str) -> None:
        for n, text in enumerate(sent[namespace]):
            await linked.send(namespace, text, f"{namespace}-{n}")

    await asyncio.gather(send_all("alpha"), send_all("beta"))
    total = 2 * RELAYED
    await raw.wait_for(lambda: alpha.done() == total + 1 and beta.done() == total)
    turns = await linked.turns()
    ledger = [t["artifacts"][0]["data"]["content"] for t in turns if t["role"] == "user"][1:]
    stored = await stored_sequences(linked.nc, f"ore.ev.alpha.{THREAD}")
    nothing_wrong = {"lost": 0, "doubled": 0, "out_of_order": 0}
    for name, endpoint in (("alpha", alpha), ("beta", beta)):
        received = endpoint.user_turns()[-total:]
        assert received == ledger, name  # the ledger's order, on every endpoint
        for origin in ("alpha", "beta"):
            assert counts(sent[origin], received) == nothing_wrong, (name, origin)
    assert alpha.stored() == stored
    assert beta.stored() == stored[1:]  # every batch since the link, the link's own first


# -- what a relayed user turn records ---------------------------------------------


async def last_user_turn(thread: LinkedThread) -> dict[str, Any]:
    user: dict[str, Any] = [t for t in await thread.turns() if t["role"] == "user"][-1]
    return user


async def test_the_sender_s_display_name_is_recorded_on_the_user_turn(linked: Linked) -> None:
    context = {"provenance": "beta", "user_name": "Ana María"}
    await linked.send("beta", "hi all", "b-1", context=context)
    await raw.wait_for(lambda: linked.alpha.done() == 2)
    turn = await last_user_turn(linked)
    assert turn["metadata"] == {"event_id": "b-1", "sender": "Ana María"}
    shown = [e for e in linked.alpha.events() if e.get("turn", {}).get("id") == turn["id"]]
    assert shown[0]["context"]["user_name"] == "Ana María"


async def test_edit_of_and_reply_to_are_recorded_on_the_user_turn(linked: Linked) -> None:
    first = await last_user_turn(linked)
    edit = {"edit_of": first["id"], "reply_to": first["id"]}
    await linked.send("beta", "fixed", "b-2", metadata=edit)
    await raw.wait_for(lambda: linked.alpha.done() == 2)
    metadata = (await last_user_turn(linked))["metadata"]
    assert (metadata["edit_of"], metadata["reply_to"]) == (first["id"], first["id"])


async def test_an_unknown_message_metadata_key_is_refused_with_the_keys_it_may_name(
    shared: LinkedThread,
) -> None:
    await shared.send("alpha", "x", "a-2", metadata={"pin": "1"})
    await raw.wait_for(lambda: shared.alpha.done() == 2)
    (error,) = shared.alpha.of_kind("error")
    assert "edit_of and reply_to" in error["message"]


async def test_a_relay_without_answers_records_the_message_and_calls_no_model(
    shared: LinkedThread,
) -> None:
    beta = await shared.watch("beta")
    await shared.link(answer="none")
    await shared.send("beta", "just people", "b-1")
    await raw.wait_for(lambda: shared.alpha.done() == 2 and beta.done() == 1)
    assert [t["role"] for t in await shared.turns()] == ["user", "assistant", "user"]
    batch = raw.unpack(beta.messages[-1].data)
    assert [e["kind"] for e in batch] == ["turn_complete", "lifecycle"]


async def test_a_namespace_wide_read_merges_its_own_and_its_linked_threads_in_order(
    shared: LinkedThread,
) -> None:
    own = await shared.watch("beta", "beta-own")
    await send(shared.nc, "beta", "mine", "b-0", thread="beta-own")
    await raw.wait_for(lambda: own.done() == 1)
    await shared.link()
    await shared.send("beta", "shared", "b-1")
    await raw.wait_for(lambda: shared.alpha.done() == 2)
    read = await shared.call("ore.api.beta.events.read", {})
    entries = [(entry["thread"], entry["sequence"]) for entry in read["events"]]
    expected = sorted(
        [(THREAD, sequence) for sequence in shared.alpha.stored()]
        + [("beta-own", sequence) for sequence in own.stored()],
        key=lambda entry: entry[1],
    )
    assert entries == expected
    paged = await shared.call("ore.api.beta.events.read", {"limit": 2})
    rest = await shared.call("ore.api.beta.events.read", {"after": paged["next"]})
    assert [(e["thread"], e["sequence"]) for e in paged["events"] + rest["events"]] == expected
    last = await shared.call("ore.api.beta.events.read", {"limit": 0})
    assert last["last"] == expected[-1][1]


async def test_a_namespace_wide_read_of_an_unlinked_namespace_has_no_other_thread(
    linked: Linked,
) -> None:
    assert (await linked.call("ore.api.gamma.events.read", {}))["events"] == []


async def test_a_conduit_cannot_change_the_settings_mirrored_from_the_links(
    shared: LinkedThread,
) -> None:
    await shared.link(answer="all")
    for namespace in ("alpha", "beta"):  # the home and the linked endpoint alike
        body = {"id": THREAD, "key": "ore.gateway.answer", "value": "none"}
        answer = await shared.call(f"ore.api.{namespace}.threads.meta.set", body)
        assert answer["error"]["code"] == "bad_request"
        assert "set by the core from the thread's links" in answer["error"]["message"]
    assert (await shared.metadata())["ore.gateway.answer"] == "all"


async def test_links_are_followed_across_a_nats_restart(
    linked: Linked, ore_nats_server: EmbeddedNatsServer
) -> None:
    core, nc = linked.core, linked.nc
    gamma = await linked.watch("gamma")
    await ore_nats_server.arestart()
    await raw.wait_for(lambda: core.ready and nc.is_connected)

    async def answering() -> bool:  # the control API is subscribed again
        try:
            await nc.request("ore.admin.health", b"{}", timeout=1)
        except (NatsError, TimeoutError):
            return False
        return True

    await raw.eventually(answering)
    gamma_room = {"namespace": "gamma", "key": "gamma.room", "value": "g"}
    await linked.link(endpoint=gamma_room, direction="out")
    await raw.wait_for(lambda: "gamma" in core.links.copies(THREAD))  # the watch goes on
    await linked.send("beta", "after", "b-1")
    await raw.wait_for(
        lambda: linked.alpha.done() == 2 and linked.beta.done() == 1 and gamma.done() == 1
    )
    assert linked.beta.user_turns()[-1] == gamma.user_turns()[-1] == "after"


async def test_deleting_a_thread_removes_its_links_so_its_id_reused_is_unreachable(
    linked: Linked,
) -> None:
    assert (await linked.call("ore.admin.threads.delete", {"id": THREAD}))["deleted"] is True
    assert (await linked.call("ore.admin.links.list", {}))["links"] == []
    gamma = await linked.watch("gamma")
    await linked.send("gamma", "mine now", "g-1")
    await raw.wait_for(lambda: gamma.done() == 1)  # the id, reused by another namespace
    answer = await linked.call("ore.api.beta.threads.get", {"id": THREAD})
    assert answer["error"]["code"] == "not_found"
    lookup = {"key": BETA["key"], "value": BETA["value"]}
    assert (await linked.call("ore.api.beta.threads.lookup", lookup))["id"] != THREAD
