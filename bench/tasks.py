"""What owning a task costs: `TaskScope.spawn` against a bare `loop.create_task`.

Run: `python bench/tasks.py [--tasks N] [--runs N]`   (not a test)

Each run starts N tasks that return at once and waits for them all; the figure is
wall time per task (start, run, done callback). A scope spawns one task per stream
and per sink for their lifetime, never one per message, so this is paid when a
thread becomes active, not on the per-message path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from ore_core.tasks import TaskScope


async def _noop() -> None:
    return None


async def _per_task(tasks: int, scoped: bool) -> float:
    loop = asyncio.get_running_loop()
    scope = TaskScope("bench")
    started = time.perf_counter()
    if scoped:
        running = [scope.spawn(_noop(), name="bench") for _ in range(tasks)]
    else:
        running = [loop.create_task(_noop()) for _ in range(tasks)]
    await asyncio.wait(running)
    await asyncio.sleep(0)  # the done callbacks
    seconds = time.perf_counter() - started
    await scope.aclose()
    return seconds / tasks * 1e6


async def main(tasks: int, runs: int) -> None:
    for label, scoped in (("loop.create_task", False), ("TaskScope.spawn", True)):
        figures = [await _per_task(tasks, scoped) for _ in range(runs)]
        print(
            f"{label:17} {statistics.median(figures):6.2f} us per task "
            f"(median of {runs}, min {min(figures):.2f}, max {max(figures):.2f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.tasks, args.runs))
