"""Subjects, stream names and partitions of the bus (docs/protocol.md, docs/architecture.md)."""

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from ore_core import InvalidThreadId, SubjectError
from ore_core.subjects import (
    HEADER_KIND,
    HEADER_MSG_ID,
    HEADER_SCHEMA,
    HEADER_TRACEPARENT,
    SCHEMA_VERSION,
    Subjects,
    partition_of,
)

thread_ids = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)
partition_counts = st.sampled_from([1, 2, 4, 8, 16, 64, 1024])

PER_THREAD: dict[str, Callable[[Subjects, str], str]] = {
    "inbound": lambda subjects, thread: subjects.inbound("slack", thread),
    "events": lambda subjects, thread: subjects.events("slack", thread),
    "output": lambda subjects, thread: subjects.output("slack", thread),
    "journal": Subjects.journal,
}
namespaces = st.from_regex(r"[a-z0-9_-]{1,32}", fullmatch=True)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (Subjects().inbound("slack", "t1"), "ore.in.slack.t1"),
        (Subjects().partitioned(5, "slack", "t1"), "ore.inp.5.slack.t1"),
        (Subjects().events("slack", "t1"), "ore.ev.slack.t1"),
        (Subjects().output("slack", "t1"), "ore.out.slack.t1"),
        (Subjects().journal("t1"), "ore.journal.t1"),
        (Subjects().api("slack", "threads.create"), "ore.api.slack.threads.create"),
        (Subjects().admin("threads.delete"), "ore.admin.threads.delete"),
        (Subjects().dlq("bad_json"), "ore.dlq.bad_json"),
        (Subjects().inbox("slack"), "_INBOX_slack"),
    ],
)
def test_default_subjects_follow_the_design_table(subject: str, expected: str) -> None:
    assert subject == expected


def test_wildcards_match_one_thread_token_or_any_api_and_dlq_tail() -> None:
    subjects = Subjects()
    assert (
        subjects.inbound_wildcard,
        subjects.events_wildcard,
        subjects.output_wildcard,
        subjects.journal_wildcard,
        subjects.api_wildcard,
        subjects.dlq_wildcard,
    ) == ("ore.in.*.*", "ore.ev.*.*", "ore.out.*.*", "ore.journal.*", "ore.api.>", "ore.dlq.>")
    assert subjects.output_wildcard_of("slack") == "ore.out.slack.*"
    assert subjects.events_wildcard_of("slack") == "ore.ev.slack.*"
    assert subjects.api_namespace_wildcard("slack") == "ore.api.slack.>"
    assert subjects.admin_wildcard == "ore.admin.>"


@pytest.mark.parametrize("namespace", ["", "Slack", "a.b", "*", ">", "x" * 33, "a b", "é"])
def test_namespaces_are_one_lowercase_token_of_at_most_32_characters(namespace: str) -> None:
    with pytest.raises(SubjectError, match="invalid namespace"):
        Subjects().inbound(namespace, "t1")
    with pytest.raises(SubjectError, match="invalid namespace"):
        Subjects().inbox(namespace)
    if namespace != "*":  # api("*", m) is the core's endpoint filter
        with pytest.raises(SubjectError, match="invalid namespace"):
            Subjects().api(namespace, "threads.get")


def test_partitioned_with_wildcards_gives_consumer_and_lookup_filters() -> None:
    assert Subjects().partitioned(3) == "ore.inp.3.*.*"
    assert Subjects().partitioned("*", "slack", "t1") == "ore.inp.*.slack.t1"


def test_custom_prefix_starts_every_subject() -> None:
    subjects = Subjects("acme.ore")
    assert subjects.inbound("ns", "t1") == "acme.ore.in.ns.t1"
    assert subjects.api("ns", "threads.list") == "acme.ore.api.ns.threads.list"
    assert subjects.admin("threads.list") == "acme.ore.admin.threads.list"
    assert subjects.inbound_transform(4).src == "acme.ore.in.*.*"


def test_default_stream_names() -> None:
    subjects = Subjects()
    assert (
        subjects.inbound_stream,
        subjects.events_stream,
        subjects.dlq_stream,
        subjects.journal_stream,
    ) == ("ORE_IN", "ORE_EVENTS", "ORE_DLQ", "ORE_JOURNAL")


@pytest.mark.parametrize(
    ("prefix", "stream"), [("ore-x", "ORE_X_IN"), ("acme.ore", "ACME_ORE_IN"), ("o_1", "O_1_IN")]
)
def test_stream_names_are_the_upper_cased_prefix_with_separators_as_underscores(
    prefix: str, stream: str
) -> None:
    assert Subjects(prefix).inbound_stream == stream


@pytest.mark.parametrize(
    "prefix", ["", "ore.*", "ore.>", "*", ">", "ore..x", ".ore", "ore.", "o re", "$JS", "ore\n"]
)
def test_prefix_that_is_not_plain_tokens_is_refused(prefix: str) -> None:
    with pytest.raises(SubjectError, match="invalid subject prefix"):
        Subjects(prefix)


@pytest.mark.parametrize("builder", PER_THREAD.values(), ids=PER_THREAD.keys())
@pytest.mark.parametrize("thread_id", ["a.b", "*", ">", "", "a b", "x" * 129])
def test_per_thread_subjects_refuse_invalid_thread_ids(
    builder: Callable[[Subjects, str], str], thread_id: str
) -> None:
    with pytest.raises(InvalidThreadId):
        builder(Subjects(), thread_id)


@pytest.mark.parametrize("name", ["threads.*", ">", "", "threads..create", "a b"])
def test_api_and_dlq_names_refuse_wildcards_and_empty_tokens(name: str) -> None:
    with pytest.raises(SubjectError):
        Subjects().api("slack", name)
    with pytest.raises(SubjectError):
        Subjects().admin(name)
    with pytest.raises(SubjectError):
        Subjects().dlq(name)


@pytest.mark.parametrize("partition", [-1, True, "1"])
def test_partitioned_refuses_a_partition_that_is_not_a_natural_number(partition: int) -> None:
    with pytest.raises(SubjectError, match="invalid partition"):
        Subjects().partitioned(partition, "slack", "t1")


@pytest.mark.parametrize("partitions", [0, -4, 3, 6, 12, True])
def test_partition_count_must_be_a_power_of_two(partitions: int) -> None:
    with pytest.raises(SubjectError, match="power of two"):
        partition_of("t1", partitions)
    with pytest.raises(SubjectError, match="power of two"):
        Subjects().inbound_transform(partitions)


def test_wire_header_names_and_schema_version() -> None:
    assert (HEADER_KIND, HEADER_SCHEMA, HEADER_MSG_ID, HEADER_TRACEPARENT, SCHEMA_VERSION) == (
        "Ore-Kind",
        "Ore-Schema",
        "Nats-Msg-Id",
        "traceparent",
        2,
    )


@given(thread_ids, partition_counts)
def test_partition_is_within_range(thread_id: str, partitions: int) -> None:
    assert 0 <= partition_of(thread_id, partitions) < partitions


@given(thread_ids, partition_counts)
def test_doubling_the_partitions_splits_each_partition_in_two(
    thread_id: str, partitions: int
) -> None:
    assert partition_of(thread_id, 2 * partitions) % partitions == partition_of(
        thread_id, partitions
    )


@given(thread_ids)
def test_thread_id_of_inverts_every_per_thread_subject(thread_id: str) -> None:
    subjects = Subjects("acme.ore")
    built = [builder(subjects, thread_id) for builder in PER_THREAD.values()]
    built.append(subjects.partitioned(partition_of(thread_id, 8), "slack", thread_id))
    assert [subjects.thread_id_of(subject) for subject in built] == [thread_id] * len(built)


@given(namespaces, thread_ids)
def test_thread_of_names_the_namespace_of_namespaced_subjects(namespace: str, thread: str) -> None:
    subjects = Subjects()
    for subject in (
        subjects.inbound(namespace, thread),
        subjects.events(namespace, thread),
        subjects.output(namespace, thread),
        subjects.partitioned(3, namespace, thread),
    ):
        assert subjects.thread_of(subject) == (namespace, thread)
    assert subjects.thread_of(subjects.journal(thread)) == (None, thread)


@pytest.mark.parametrize(
    "subject",
    [
        "other.in.ns.t1",
        "ore.api.ns.threads.create",
        "ore.in.t1",
        "ore.in.ns.t1.x",
        "ore.inp.x.ns.t1",
        "ore.in",
        "ore.out.NS.t1",
    ],
)
def test_thread_id_of_refuses_subjects_of_another_prefix_or_kind(subject: str) -> None:
    with pytest.raises(SubjectError, match="not a per-thread subject"):
        Subjects().thread_id_of(subject)


async def test_partition_of_matches_the_servers_partition_transform(
    ore_nats_client: Client,
) -> None:
    subjects = Subjects()
    partitions = 8
    js = ore_nats_client.jetstream()
    await js.add_stream(
        name=subjects.inbound_stream,
        subjects=[subjects.inbound_wildcard],
        subject_transform=subjects.inbound_transform(partitions),
    )
    ids = [f"th{i:04d}" for i in range(64)] + ["-", "_", "Z" * 128, "a-B_9", "0"]
    for namespace in ("slack", "a", "x" * 32):
        for thread_id in ids:
            ack = await js.publish(subjects.inbound(namespace, thread_id), b"x")
            stored = await js.get_msg(subjects.inbound_stream, ack.seq)
            # Only the thread is hashed: one thread id lands in one partition everywhere.
            assert stored.subject == subjects.partitioned(
                partition_of(thread_id, partitions), namespace, thread_id
            )
