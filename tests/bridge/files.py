"""The files the gateway files tests send, shared by the tests that count them."""

from __future__ import annotations

import hashlib


def files_from(origin: str) -> dict[str, tuple[str, bytes]]:
    """`origin`'s image and 5 MB PDF (bytes of its own): name -> (type, bytes)."""
    seed = origin.encode()
    png = b"\x89PNG\r\n\x1a\n" + seed + bytes(range(256)) * 40
    pdf = b"%PDF-1.7 " + seed + bytes(range(256)) * 20_480  # 5,242,889+ bytes
    return {f"{origin}.png": ("image/png", png), f"{origin}.pdf": ("application/pdf", pdf)}


def sha(data: bytes) -> str:
    """The sha256 a file is counted by."""
    return hashlib.sha256(data).hexdigest()
