"""Which files a platform can be handed as its own (`Capabilities.takes_file`)."""

from __future__ import annotations

from ore_core.artifacts import Attachment
from ore_core.conduit import Capabilities


def _file(media_type: str = "image/png", size: int = 1000) -> Attachment:
    return Attachment(
        name="f", media_type=media_type, size=size, sha256="a" * 64, bucket="ORE_FILES"
    )


def test_a_platform_that_declares_nothing_takes_no_file() -> None:
    assert not Capabilities().takes_file(_file(size=0))


def test_a_file_over_the_limit_is_not_taken_and_one_at_the_limit_is() -> None:
    caps = Capabilities(file_max_bytes=1000)
    assert caps.takes_file(_file(size=1000))
    assert not caps.takes_file(_file(size=1001))


def test_only_the_declared_media_types_are_taken() -> None:
    caps = Capabilities(file_max_bytes=None, file_types=("image/*", "application/pdf"))
    assert caps.takes_file(_file("image/jpeg", 10**9))
    assert caps.takes_file(_file("application/pdf"))
    assert not caps.takes_file(_file("text/plain"))
