"""The conduits of the checkout ore was installed from (`ore conduit --list --all`).

`pip install ./` (or `-e .`) records where it installed from in the distribution's
`direct_url.json` (PEP 610): a `file://` URL of this repository's checkout, whose
`conduits/*/pyproject.toml` name the conduits a user can install from it. An install
from an index records no such URL: then there is no checkout to list.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["CheckoutConduit", "checkout_conduits", "checkout_root"]

_DISTRIBUTION = "ore-core"


@dataclass(frozen=True, slots=True)
class CheckoutConduit:
    """A conduit package of the checkout: its folder, distribution and description."""

    name: str
    path: Path
    distribution: str
    description: str

    @property
    def install_line(self) -> str:
        return f"ore install {self.path}"


def checkout_root() -> Path | None:
    """The checkout ore-core was installed from, if it was (and is still there)."""
    try:
        recorded = metadata.distribution(_DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not recorded:
        return None
    url = urlparse(str(json.loads(recorded).get("url", "")))
    root = Path(unquote(url.path))
    return root if url.scheme == "file" and (root / "conduits").is_dir() else None


def checkout_conduits(root: Path) -> list[CheckoutConduit]:
    """Every `conduits/NAME` package of the checkout at `root`, by name."""
    found: list[CheckoutConduit] = []
    for pyproject in sorted(root.glob("conduits/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        found.append(
            CheckoutConduit(
                name=pyproject.parent.name,
                path=pyproject.parent,
                distribution=str(project.get("name", "")),
                description=str(project.get("description", "")),
            )
        )
    return found
