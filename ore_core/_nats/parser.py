"""Receiving for `OreNatsClient`: nats-py's protocol parser, one pass over each read.

nats-py's `Parser.parse` tries its regexes on a bytearray for every frame, deletes
each frame from the front of it and awaits the client's `_process_msg`, a coroutine
per message. `OreParser` walks a read with an offset instead: one regex, at the
offset, reads a MSG or HMSG control line in the form servers write (single spaces,
numeric sid, a header block that starts `NATS/1.0`), and a message of an inline
subscription (`OreNatsClient.subscribe_inline`) whose header block is plain (no
status line) is built and handed to its callback right there, without a coroutine.

Everything else behaves as nats-py because nats-py does it: messages of ordinary
subscriptions go to the client's `_process_msg`, status headers (503 No Responders,
100 heartbeats, 408 ...) to its `_process_headers`; any other frame (PING, PONG, +OK,
-ERR, INFO, anything unusual or malformed) and a frame cut short by the end of a read
go, with the rest of the read, to nats-py's own `Parser.parse`, which keeps what it
has not finished (`buf`, `state`, `needed`) for the next read as it always did; the
next read first lets it finish that frame. Where the regex matches, nats-py's
matches too, with the same groups (a test feeds both parsers random streams).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import nats.aio.client
from nats.protocol.parser import AWAITING_CONTROL_LINE, CRLF_SIZE, Parser

if TYPE_CHECKING:
    from ore_core._nats.connection import OreNatsClient

__all__ = ["OreParser"]

_FRAME = re.compile(
    rb"(H)?MSG ([^\s]+) ([0-9]+) (?:([^\s]+) )?(?(1)([1-9][0-9]+) )([0-9]+)\r\n(?(1)(?=NATS/1\.0))"
)
"""A MSG or (with `H`) HMSG control line as servers write it: subject, sid, reply,
header block size (HMSG only), total size.

An HMSG's header block must start `NATS/1.0`: nats-py's HMSG regex may read a line
without a reply across its CRLF when the block starts with digits. The block's size
has two digits or more: nats-py fails on a block shorter than `NATS/1.0\r\n`, so it
reads such a frame itself."""

_PLAIN_BLOCK = getattr(nats.aio.client, "parse_email", None) is None  # not in its __all__
"""nats-py parses header lines with the client's `_parse_header_lines` (no
fast_mail_parser installed): a plain block can be parsed here the same way."""


class OreParser(Parser):
    """nats-py's parser with the common frames read in one pass (module docstring)."""

    nc: OreNatsClient

    async def parse(self, data: bytes = b"") -> None:
        """Handle one read: what nats-py's `parse` does, with less Python per message."""
        buf = self.buf
        if buf or self.state != AWAITING_CONTROL_LINE:
            data = await self._resume(data)
            if self.buf is not buf:  # the client reset the parser: the read is dropped
                return
        nc = self.nc
        inline = nc._inline
        subs = nc._subs
        match = _FRAME.match
        pos = 0
        end = len(data)
        while pos < end:
            frame = match(data, pos)
            if frame is None:
                break
            _, subject, sid, reply, block_size, size = frame.groups()
            start = body = frame.end()
            stop = body + int(size)
            if block_size is None:
                block = None
            else:
                start += int(block_size)
                if start > stop:
                    break
                block = data[body:start]
            if stop + CRLF_SIZE > end:
                break
            payload = data[start:stop]
            pos = stop + CRLF_SIZE  # nats-py does not check that these two are CRLF
            sid = int(sid)
            callback = inline.get(sid)
            subscription = subs.get(sid)
            if callback is None or subscription is None:
                await nc._process_msg(sid, subject, reply or b"", payload, block)
            else:  # an inline subscription's message, delivered without a coroutine
                if block is None:
                    headers = None
                elif _PLAIN_BLOCK and block[8:10] == b"\r\n":  # `NATS/1.0\r\n`: no status
                    headers = nc._parse_header_lines(block[10:]) or None
                else:
                    headers = await nc._process_headers(block)
                failed = nc._call_inline(
                    callback, subscription, sid, subject, reply or b"", payload, headers
                )
                if failed is not None:
                    await nc._error_cb(failed)
            if self.buf is not buf:  # reset by what handled the message, as above
                return
        else:
            return
        await super().parse(data[pos:])

    async def _resume(self, data: bytes) -> bytes:
        """Finish the frame an earlier read left unfinished; returns the rest of `data`."""
        buf = self.buf
        if self.state == AWAITING_CONTROL_LINE:  # a control line cut short: read it whole
            buf.extend(data)
            data = bytes(buf)
            buf.clear()
            return data
        need = max(0, self.needed + CRLF_SIZE - len(buf))  # the rest of the payload
        if self.header_needed > self.needed:  # nats-py reads that block past the frame
            need = len(data)
        await super().parse(data[:need])
        return data[need:]
