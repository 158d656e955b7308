"""`ConduitClient.send(images=...)`: the images go on the wire; too large fails at once."""

from __future__ import annotations

import base64

import pytest
from nats.aio.client import Client

from ore_core import ApiError, ConduitClient, UserMessageEvent
from ore_core.events import decode_ingress
from ore_core.subjects import Subjects
from tests.conduit.test_client import NS

PNG = "data:image/png;base64,iVBORw0KGgo="


@pytest.mark.usefixtures("streams")
async def test_send_with_images_stores_them_on_the_event(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    await client.send("t-1", "look", id="m-1", images=[PNG])
    stored = await ore_nats_client.jetstream().get_msg(
        subjects.inbound_stream, subject=subjects.partitioned("*", NS, "t-1")
    )
    event = decode_ingress(stored.data)
    assert isinstance(event, UserMessageEvent)
    assert (event.content, event.images) == ("look", (PNG,))


@pytest.mark.usefixtures("streams")
async def test_a_message_over_the_servers_max_payload_is_refused_at_once_as_too_large(
    client: ConduitClient, ore_nats_client: Client, subjects: Subjects
) -> None:
    image = "data:image/jpeg;base64," + base64.b64encode(b"x" * client.nc.max_payload).decode()
    with pytest.raises(ApiError) as refused:
        await client.send("t-1", "huge", id="m-1", images=[image])
    assert (refused.value.status, refused.value.code) == (413, "too_large")
    info = await ore_nats_client.jetstream().stream_info(subjects.inbound_stream)
    assert info.state.messages == 0
