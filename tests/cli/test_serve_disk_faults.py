"""A real `ore serve` on the SQLite store while its disk fails: `/readyz` tells the truth.

docs/operating.md promises `/readyz` 503 while the store cannot save. The disk is a real
one: a small tmpfs filled to the brim, or an ext4 image that remounts itself read-only
after an error (a read-only remount is refused while SQLite holds its files open for
writing, so the test triggers the error ext4 reacts to). Mounting needs root on Linux; a
machine that cannot mount skips with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from ore_core.bus.server.embedded import EmbeddedNatsServer
from tests.cli.test_cli_serve import Served, client_of, free_port, start_serve, wait_until_serving
from tests.disk import fill_disk

__all__ = ["client_of", "start_serve"]  # fixtures, imported for pytest

pytestmark = pytest.mark.slow  # starts processes: `-m 'not slow'` skips it

FAST = {
    "ORE_NATS__RETRY_DELAY": "0.05",
    "ORE_NATS__RETRY_DELAY_MAX": "0.2",
    "ORE_NATS__STORE_PROBE_INTERVAL": "0.02",
}
LARGE = 200_000
"""Characters in the message sent during the fault: its save needs new disk pages."""
SAMPLED_FAILURES = 8
"""Failed saves (retries of the parked message) the fault lasts while /readyz is sampled."""


def _mount(*args: str) -> None:
    """Run `mount`; skip (naming why) where this machine does not allow it."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a file system needs root on Linux")
    mounted = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount here: {mounted.stderr.strip()}")


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def _ext4(path: Path, image: Path) -> Iterator[Path]:
    """An ext4 image mounted with errors=remount-ro."""
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image here: {made.stderr.decode().strip()}")
    path.mkdir()
    _mount("-o", "loop,errors=remount-ro", str(image), str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _go_read_only(mount_point: Path) -> None:
    """Make ext4 meet an error: with errors=remount-ro it turns read-only at once."""
    source = subprocess.run(
        ["findmnt", "-no", "SOURCE", str(mount_point)], capture_output=True, text=True, check=True
    ).stdout.strip()
    trigger = Path("/sys/fs/ext4") / Path(source).name / "trigger_fs_error"
    if not trigger.exists():
        pytest.skip(f"this kernel has no {trigger} to make ext4 read-only under a writer")
    trigger.write_text("ore test\n")


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


def _save_failures(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r"^ore_store_save_failures_total (\S+)$", text, re.MULTILINE)
    return 0 if found is None else int(float(found.group(1)))


async def _send(nc: Client, thread_id: str, text: str) -> None:
    message = {"kind": "user_message", "id": uuid.uuid4().hex, "content": text}
    await nc.jetstream().publish(
        f"ore.in.raw.{thread_id}",
        json.dumps(message).encode(),
        headers={"Nats-Msg-Id": message["id"]},
    )


class _Events:
    """Everything the core sends on one raw thread."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    async def on_message(self, msg: Any) -> None:
        message = json.loads(msg.data)
        for event in message["events"] if message["kind"] == "batch" else [message]:
            phase = event.get("phase")
            self.kinds.append(f"{event['kind']}:{phase}" if phase else event["kind"])

    def count(self, kind: str) -> int:
        return self.kinds.count(kind)


async def _until(condition: Callable[[], bool], served: Served) -> None:
    while not condition():
        assert served.process.poll() is None, served.stderr()
        await asyncio.sleep(0.01)


async def _serve_on(
    store: Path, start: Callable[..., Served], connect: Any, nats_url: str
) -> tuple[Served, Client, _Events, int]:
    port = free_port()
    served = start(
        "--nats", nats_url, "--health-port", str(port), env={**FAST, "ORE_STORE__PATH": str(store)}
    )
    nc = await connect(nats_url)
    await wait_until_serving(nc, served)
    events = _Events()
    await nc.subscribe("ore.out.raw.t1", cb=events.on_message)
    await _send(nc, "t1", "before")
    await _until(lambda: events.count("lifecycle:done") == 1, served)
    await _until(lambda: _readyz(port) == 200, served)
    return served, nc, events, port


async def _sample_through_the_fault(
    nc: Client, served: Served, events: _Events, port: int
) -> list[int]:
    """Send during the fault; sample /readyz from the first failed save until the
    fault has failed SAMPLED_FAILURES more saves. Returns the samples."""
    await _send(nc, "t1", "during " + "x" * LARGE)  # more than the WAL's free pages
    await _until(lambda: events.count("notice") == 1, served)  # the first save failed
    first = _save_failures(port)
    assert first >= 1
    samples: list[int] = []
    while _save_failures(port) < first + SAMPLED_FAILURES:
        samples.append(await asyncio.to_thread(_readyz, port))
        assert served.process.poll() is None, served.stderr()
    samples.append(await asyncio.to_thread(_readyz, port))
    return samples


async def test_readyz_is_503_from_the_first_failed_save_on_a_full_disk_to_the_first_good_one(
    tmp_path: Path,
    ore_nats_server: EmbeddedNatsServer,
    start_serve: Callable[..., Served],
    client_of: Any,
) -> None:
    with _tmpfs(tmp_path / "disk", "2m") as disk:
        served, nc, events, port = await _serve_on(
            disk / "ore.db", start_serve, client_of, ore_nats_server.url
        )
        filler = fill_disk(disk)
        samples = await _sample_through_the_fault(nc, served, events, port)
        assert samples.count(200) == 0, f"{samples.count(200)} of {len(samples)} said ready"
        assert len(samples) >= SAMPLED_FAILURES
        assert events.count("lifecycle:done") == 1  # the answer waits, nothing acknowledged
        filler.unlink()
        await _until(lambda: events.count("lifecycle:done") == 2, served)  # saved at last
        await _until(lambda: _readyz(port) == 200, served)
        assert await served.terminate() == 0


async def test_readyz_is_503_from_the_first_failed_save_on_a_disk_gone_read_only(
    tmp_path: Path,
    ore_nats_server: EmbeddedNatsServer,
    start_serve: Callable[..., Served],
    client_of: Any,
) -> None:
    # ext4 stays read-only after its error until it is unmounted and checked: the
    # whole rest of the run is the fault, and not one sample may say ready.
    with _ext4(tmp_path / "disk", tmp_path / "disk.img") as disk:
        served, nc, events, port = await _serve_on(
            disk / "ore.db", start_serve, client_of, ore_nats_server.url
        )
        _go_read_only(disk)
        samples = await _sample_through_the_fault(nc, served, events, port)
        assert samples.count(200) == 0, f"{samples.count(200)} of {len(samples)} said ready"
        assert len(samples) >= SAMPLED_FAILURES
        assert events.count("lifecycle:done") == 1
        served.process.kill()
        served.process.wait()


def _refusal(served: Served) -> str:
    """The last line `ore serve` wrote before it exited (it must exit, and not with 0)."""
    assert served.process.wait(timeout=60) != 0
    return served.stderr().strip().splitlines()[-1]


def test_serve_on_a_read_only_disk_says_which_directory_is_read_only(
    tmp_path: Path, start_serve: Callable[..., Served]
) -> None:
    with _tmpfs(tmp_path / "disk", "1m") as disk:
        _mount("-o", "remount,ro", str(disk))
        served = start_serve(env={"ORE_STORE__PATH": str(disk / "ore.db")})
        line = _refusal(served)
    assert f"the file system holding {disk} is read-only" in line, line


def test_serve_on_a_full_disk_says_which_directory_is_full(
    tmp_path: Path, start_serve: Callable[..., Served]
) -> None:
    with _tmpfs(tmp_path / "disk", "64k") as disk:
        fill_disk(disk)
        served = start_serve(env={"ORE_STORE__PATH": str(disk / "ore.db")})
        line = _refusal(served)
    assert f"the file system holding {disk} is full" in line, line
