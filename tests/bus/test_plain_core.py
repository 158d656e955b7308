"""The core on nats-py's plain client: the fallback of the private transport.

`ORE_NATS_PLAIN=1` makes `connect_nats` return nats-py's own client, as it does when
nats-py lacks a private name the fast transport relies on (see
tests/conduit/test_plain_client.py for the check and its warning). The core's key
cases run through it again, taken as they are from the ordinary tests: turns in order
with their live message and stored batch (the puller's pulls, the pipeline's acked
publishes, the egress, the ingress acks), interrupts, de-duplication, bad input to the
dead-letter stream, and a stop that lets a turn finish. Slower, never different.
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NatsClient

from ore_core._nats import internals
from ore_core._nats.connection import OreNatsClient
from ore_core.bus.service import CoreService
from tests.bus import test_service_e2e
from tests.bus.ingress import test_bad_input, test_ingress


@pytest.fixture(autouse=True)
def plain_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of these tests is nats-py's own client."""
    monkeypatch.setenv(internals.PLAIN_ENV, "1")


small_core = test_bad_input.small_core  # the fixture of the bad-input cases
test_raw_client_receives_the_documented_events_of_an_echo_turn_in_order = (
    test_service_e2e.test_raw_client_receives_the_documented_events_of_an_echo_turn_in_order
)
test_a_turn_is_one_live_message_and_one_stored_batch_ending_with_done = (
    test_service_e2e.test_a_turn_is_one_live_message_and_one_stored_batch_ending_with_done
)
test_many_threads_are_answered_concurrently_each_in_order = (
    test_service_e2e.test_many_threads_are_answered_concurrently_each_in_order
)
test_stored_events_chain_nats_last_sequence_per_thread = (
    test_service_e2e.test_stored_events_chain_nats_last_sequence_per_thread
)
test_control_api_answers_next_to_the_ingress = (
    test_service_e2e.test_control_api_answers_next_to_the_ingress
)
test_stop_lets_a_running_turn_finish_and_acknowledges_it = (
    test_service_e2e.test_stop_lets_a_running_turn_finish_and_acknowledges_it
)
test_a_message_is_acknowledged_only_once_it_is_handled = (
    test_ingress.test_a_message_is_acknowledged_only_once_it_is_handled
)
test_an_interrupt_cancels_the_turn_and_acknowledges_the_messages_it_dropped = (
    test_ingress.test_an_interrupt_cancels_the_turn_and_acknowledges_the_messages_it_dropped
)
test_a_duplicate_publish_is_stored_and_answered_once = (
    test_ingress.test_a_duplicate_publish_is_stored_and_answered_once
)
test_bad_input_is_dead_lettered_with_its_reason = (
    test_bad_input.test_bad_input_is_dead_lettered_with_its_reason
)
test_bad_input_is_answered_with_an_error_then_done = (
    test_bad_input.test_bad_input_is_answered_with_an_error_then_done
)


async def test_the_plain_path_runs_the_core_on_nats_py_s_own_client(core: CoreService) -> None:
    assert type(core.nc) is NatsClient
    assert not isinstance(core.nc, OreNatsClient)
