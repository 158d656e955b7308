"""`ore link add|list|remove` as an operator runs it, against a real core (issue 29)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from nats.aio.client import Client

from tests.bridge.linked import answered_thread
from tests.bus import raw
from tests.bus.conftest import CoreFactory
from tests.ore_process import ore_at as ore


async def test_an_operator_links_lists_and_unlinks_an_endpoint(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    await answered_thread(ore_nats_client, "t-cli")
    status, out, err = await ore(
        ore_nats_url, tmp_path, "link", "add", "t-cli", "web:web.thread=w-1", "--answer", "all"
    )
    assert status == 0, err
    assert "linked web:web.thread=w-1 to thread t-cli (inout)" in out
    status, out, _ = await ore(ore_nats_url, tmp_path, "link", "list", "--json")
    (links,) = json.loads(out)
    assert (links["thread"], links["answer"], links["endpoints"][0]["value"]) == (
        "t-cli",
        "all",
        "w-1",
    )
    status, out, _ = await ore(ore_nats_url, tmp_path, "link", "remove", "web:web.thread=w-1")
    assert (status, out.strip()) == (0, "unlinked web:web.thread=w-1 from thread t-cli")


async def test_a_bad_endpoint_is_one_error_line_and_exit_status_1(
    start_core: CoreFactory, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    status, _, err = await ore(ore_nats_url, tmp_path, "link", "add", "t", "slack:C0123")
    assert status == 1
    assert "no installed conduit named 'slack' declares a conversation_key" in err
    assert len(err.strip().splitlines()) == 1


async def test_a_nats_url_where_no_server_listens_is_one_error_line_not_a_wait(
    tmp_path: Path,
) -> None:
    # A port nothing listens on: the operator's one-shot client tries it and stops,
    # where a reconnecting client would log each retry until its connect timeout.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{probe.getsockname()[1]}"
    status, out, err = await ore(url, tmp_path, "link", "list")
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        f"Error: ore link: cannot connect conduit ore-link to NATS at ['{url}']: "
        "nats: no servers available for connection"
    ]


async def test_linking_to_an_unknown_thread_says_so(
    start_core: CoreFactory, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    status, _, err = await ore(ore_nats_url, tmp_path, "link", "add", "nope", "web:web.thread=1")
    assert status == 1
    assert "thread nope not found" in err


async def test_the_list_shows_each_endpoint_s_last_delivery_status(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    await answered_thread(ore_nats_client, "t-cli")
    status, _, err = await ore(ore_nats_url, tmp_path, "link", "add", "t-cli", "web:web.thread=w-1")
    assert status == 0, err
    turns = await ore_nats_client.request(
        "ore.admin.threads.turns", b'{"id": "t-cli"}', timeout=raw.TIMEOUT
    )
    turn = json.loads(turns.data)["turns"][0]["id"]
    report = {
        "thread": "t-cli",
        "sequence": 1,
        "turn": turn,
        "status": "failed",
        "detail": "gone",
        "reason": "refused_permission",
    }
    await ore_nats_client.request(
        "ore.api.web.deliveries.report", json.dumps(report).encode(), timeout=raw.TIMEOUT
    )
    status, out, _ = await ore(ore_nats_url, tmp_path, "link", "list")
    assert status == 0
    (row,) = [line for line in out.splitlines() if "web:web.thread=w-1" in line]
    assert f"failed [refused_permission]: gone (turn {turn[:8]}, #1)" in row
    status, out, _ = await ore(ore_nats_url, tmp_path, "link", "list", "--json")
    (links,) = json.loads(out)
    (web,) = links["endpoints"]
    assert web["last_delivery"] == {
        "status": "failed",
        "turn": turn,
        "sequence": 1,
        "detail": "gone",
        "reason": "refused_permission",
    }


async def test_link_add_takes_a_unique_prefix_of_the_thread_id_as_ore_threads_does(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    await answered_thread(ore_nats_client, "ab258e56cafe")
    status, out, err = await ore(
        ore_nats_url, tmp_path, "link", "add", "ab258e", "web:web.thread=w-1"
    )
    assert status == 0, err
    assert out.splitlines()[0] == "linked web:web.thread=w-1 to thread ab258e56cafe (inout)"
    status, out, err = await ore(
        ore_nats_url, tmp_path, "link", "list", "--thread", "ab25", "--json"
    )
    assert [links["thread"] for links in json.loads(out)] == ["ab258e56cafe"], err


async def test_an_ambiguous_thread_prefix_is_refused_naming_the_candidates(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    for thread in ("ab1-one", "ab2-two"):
        await answered_thread(ore_nats_client, thread, f"{thread}-1")
    status, _, err = await ore(ore_nats_url, tmp_path, "link", "add", "ab", "web:web.thread=w-1")
    assert status == 1
    assert err.strip().splitlines() == [
        "Error: ore link: thread id ab is ambiguous in the store of the core (ab1-one, "
        "ab2-two): type more of it"
    ]


async def test_link_add_prints_its_table_with_the_header_over_the_columns(
    start_core: CoreFactory, ore_nats_client: Client, ore_nats_url: str, tmp_path: Path
) -> None:
    await start_core()
    await answered_thread(ore_nats_client, "t-table")
    status, out, err = await ore(
        ore_nats_url, tmp_path, "link", "add", "t-table", "web:web.thread=a-long-web-thread"
    )
    assert status == 0, err
    header, row = out.splitlines()[1:]
    starts = [[m.start() for m in re.finditer(r"\S+", line)] for line in (header, row)]
    assert starts[0] == starts[1]
