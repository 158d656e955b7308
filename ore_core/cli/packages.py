"""What `ore uninstall` may remove: installed packages that ore itself does not need.

Removing ore-core or one of its dependencies (click, nats-py, pydantic, ...) breaks
every `ore` command, including the one that would reinstall it; a name that is not
installed is almost always a typo. Both are refused before pip runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

__all__ = ["CORE_DISTRIBUTION", "canonical", "core_dependencies", "installed_name", "refusals"]

CORE_DISTRIBUTION = "ore-core"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name (`Ore_Core` -> `ore-core`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def core_dependencies() -> set[str]:
    """ore-core and every distribution it needs, transitively (canonical names)."""
    needed: set[str] = set()
    pending = [CORE_DISTRIBUTION]
    while pending:
        name = canonical(pending.pop())
        if name in needed:
            continue
        needed.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement, _, marker = line.partition(";")
            if "extra" in marker:
                continue  # needed by an extra (e.g. `testing`), not by ore
            found = _NAME.match(requirement.strip())
            if found:
                pending.append(found.group(0))
    return needed


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def installed_name(package: str) -> str:
    """`package`, or the ore distribution it is short for when only that one is
    installed (`telegram` -> `ore-conduit-telegram`, `openai` -> `ore-openai`): the
    names `ore conduit --list` and `ore plugins` show."""
    if _installed(canonical(package)):
        return package
    for candidate in (f"ore-conduit-{package}", f"ore-{package}"):
        if _NAME.fullmatch(candidate) and _installed(canonical(candidate)):
            return candidate
    return package


def refusals(packages: Iterable[str]) -> list[str]:
    """One reason per package that must not be uninstalled (empty: all may go)."""
    own = core_dependencies()
    reasons = []
    for package in packages:
        name = canonical(package)
        if name in own:
            what = "ore itself" if name == CORE_DISTRIBUTION else "a dependency of ore"
            reasons.append(f"{package} is {what}: removing it would break every ore command")
        elif not _installed(name):
            reasons.append(f"{package} is not installed (`ore plugins` lists what is)")
    return reasons
