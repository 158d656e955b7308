"""A soak: a fixed rate of conversations, a worker killed every few minutes, for an hour.

Run: `python bench/soak.py [--minutes 60] [--sync always] [--seed 1] [--threads 20]
[--conduit-threads 5] [--period 1.0] [--fault-every 180]` (not a test;
tests/scale/test_soak.py runs a short one in CI).

The run is tests/scale/soak.py: one embedded nats-server, two `ore serve` workers,
every thread sending its next numbered message each `--period` s (`--threads` from
this process, `--conduit-threads` from a conduit process on the SDK); every
`--fault-every` s (±50 %) a kill -9, of a worker (a new one starts) and of the conduit
(started again) in turn. It prints per
kill the seconds until everything sent before it was answered and until the ingress
backlog was gone; RSS and open fds of the nats-server and every worker at 5, 30 and 60
minutes and their slope from `--warmup` s after each one started; and the checker's classes
(ok, lost, duplicated, reordered, unanswered ...). Exit status 1 on any of them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scale.checker import CLASSES
from tests.scale.soak import SoakResult, soak_run


def report(result: SoakResult, warmup: float) -> None:
    print(f"\n{result.minutes:g} min: sent {result.sent}, answered {result.answered}")
    print("| class | count |\n|---|---|")
    for name in CLASSES:
        print(f"| {name} | {getattr(result.verdict, name)} |")
    store = result.store_report
    print(
        f"| store: lost / doubled / out of order | {store.store_lost} / "
        f"{store.store_doubled} / {store.store_order_violations} |"
    )
    print(f"| given up by JetStream (MAX_DELIVERIES advisories) | {len(result.given_up)} |")
    print("\n| kill at | target | all earlier answered after | backlog gone after |")
    print("|---|---|---|---|")
    for r in result.recoveries:
        drain = "never" if r.drain is None else f"{r.drain:.1f}s"
        pending = "never" if r.pending_zero is None else f"{r.pending_zero:.1f}s"
        print(f"| {r.at:.0f}s | {r.target} | {drain} | {pending} |")
    print(f"\n| process | RSS KiB/min ({warmup:g}s after its start on) | fds/min | samples |")
    print("|---|---|---|---|")
    for name, (rss, fds, count) in sorted(result.slopes(warmup).items()):
        print(f"| {name} | {rss:+.1f} | {fds:+.2f} | {count} |")
    print("\n| process | minute | RSS KiB | fds |\n|---|---|---|---|")
    names = sorted({s.name for s in result.samples})
    for name in names:
        for minute in (5, 30, 60):
            if minute <= result.minutes:
                sample = result.at_minute(name, minute)
                if sample is not None and abs(sample.at - minute * 60) < 60:
                    print(f"| {name} | {minute} | {sample.rss_kib} | {sample.fds} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sync", default="always", help="the server's fsync policy (nats.sync)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--period", type=float, default=1.0, help="seconds between messages")
    parser.add_argument("--fault-every", type=float, default=180.0, help="seconds")
    parser.add_argument(
        "--conduit-threads", type=int, default=5, help="threads sent by a conduit process"
    )
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds")
    parser.add_argument("--drain", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ore-soak-") as name:
        result = asyncio.run(
            soak_run(
                Path(name),
                minutes=args.minutes,
                sync=args.sync,
                seed=args.seed,
                threads=args.threads,
                period=args.period,
                fault_every=args.fault_every,
                sample_every=args.sample_every,
                drain=args.drain,
                conduit_threads=args.conduit_threads,
            )
        )
    report(result, args.warmup)
    sys.exit(0 if result.clean else 1)


if __name__ == "__main__":
    main()
