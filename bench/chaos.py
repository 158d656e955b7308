"""A Jepsen-style fault run: 3 nats-server nodes, 3 `ore serve` workers, faults, a checker.

Run: `python bench/chaos.py [--duration 300] [--sync always] [--seed 1] [--threads 20]
[--period 1.0] [--once] [--keep DIR]` (not in the default test run; tests/scale/test_faults.py runs
`--once` in CI).

The run, the faults and the checker are tests/scale/faults.py and checker.py: 10 s
quiet, then a node fault every ~5 s (kill -9 of one node, of two, SIGSTOP of a node or
of a worker) for `--duration` seconds, a worker killed every minute, all three nodes
killed once at half time; then heal and drain (at most `--drain` s). `--once` applies
each kind once instead. It prints the fault log and one table row per class of the
checker (ok, lost prefix/middle/postfix, unexpected, duplicated, reordered,
unanswered), the messages JetStream gave up (MAX_DELIVERIES advisories), the SQLite
store's audit, and whether the nodes agree after the heal; per lost message, whether
`ORE_IN` holds it (the bus stored it and ore did not answer it) or not.
Network delay and partitions (TCP proxies) are not among the faults yet.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scale.checker import CLASSES
from tests.scale.faults import EVERY_KIND, RunResult, fault_run


def report(result: RunResult) -> None:
    print(f"\nsync {result.sync}: sent {result.sent}, answered {result.answered}, ", end="")
    print(f"drained in {result.drain_seconds:.1f}s after the heal")
    print("| class | count |\n|---|---|")
    for name in CLASSES:
        print(f"| {name} | {getattr(result.verdict, name)} |")
    store = result.store_report
    print(
        f"| store: lost / doubled / out of order | {store.store_lost} / "
        f"{store.store_doubled} / {store.store_order_violations} |"
    )
    print(f"| given up by JetStream (MAX_DELIVERIES advisories) | {len(result.given_up)} |")
    print(f"| nodes agree after the heal | {'yes' if result.nodes_agree else 'NO'} |")
    print(f"| workers that stopped by themselves | {len(result.stopped_by_themselves)} |")
    for worker in result.stopped_by_themselves:
        print(f"  {worker}")
    if not result.nodes_agree:
        print(result.node_states)
    for record in result.faults:
        print(f"  {record.at:7.1f}s {record.kind} {record.target} ({record.took:.1f}s)")
    for thread_id, verdict in list(result.bad_threads.items())[:10]:
        print(f"  {thread_id}: {verdict.as_dict()} answers {result.bad_answers[thread_id]}")
        answered = set(result.bad_answers[thread_id])
        last = max([n for (t, n) in result.sent_at if t == thread_id] or [0])
        missing = sorted(set(range(1, last + 1)) - answered)
        acked = [f"{n}@{result.sent_at.get((thread_id, n), -1):.1f}s" for n in missing]
        print(f"    missing, publish acked at: {acked}")
    for (thread_id, n), sequences in sorted(result.lost_stored_at.items())[:20]:
        where = f"in ORE_IN at {sequences}" if sequences else "not in ORE_IN"
        print(f"  lost {thread_id}:{n}: {where}")
    for advisory in result.given_up[:10]:
        print(f"  given up: {advisory}")
    for line in result.store_report.details[:10]:
        print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of faults")
    parser.add_argument("--sync", default="always", help="the nodes' fsync policy (nats.sync)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--period", type=float, default=1.0, help="seconds between messages")
    parser.add_argument("--drain", type=float, default=300.0)
    parser.add_argument("--once", action="store_true", help="each kind of fault once")
    parser.add_argument(
        "--keep", type=Path, help="run in this directory and keep it (workers' logs, data)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ore-chaos-") as name:
        directory = Path(name) if args.keep is None else args.keep
        directory.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(
            fault_run(
                directory,
                sync=args.sync,
                seed=args.seed,
                threads=args.threads,
                period=args.period,
                quiet=10.0,
                kinds=list(EVERY_KIND) if args.once else None,
                duration=args.duration,
                gap=5.0,
                hold=3.0,
                drain=args.drain,
            )
        )
    report(result)
    sys.exit(0 if result.clean else 1)


if __name__ == "__main__":
    main()
