"""Tests mirror the source: every package of ore_core has its folder of tests.

`tests/<package>/` holds the tests of `ore_core/<package>/` (docs/architecture.md,
"Where the tests are"), so a newcomer finds the test of a module by its path. A
package whose tests live elsewhere is listed in ELSEWHERE with the reason.
"""

from __future__ import annotations

from pathlib import Path

import ore_core
from tests.paths import ROOT

PACKAGE = Path(ore_core.__file__).parent

ELSEWHERE = {
    "plugins/builtin": "the built-in plugins are loaded and run as plugins: tests/plugins/",
}


# Top-level test files named for what they test rather than for their module.
TOP_LEVEL_OTHERS = {
    "test_hand_encoders.py": "the hand encoders of events.py (ore_core/events.py names it)",
}


def packages() -> list[str]:
    """Every sub-package of ore_core, as a path below it (`bus/egress`)."""
    return sorted(
        init.parent.relative_to(PACKAGE).as_posix()
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE and "__pycache__" not in init.parts
    )


def has_tests(package: str) -> bool:
    return any((ROOT / "tests" / package).glob("test_*.py"))


def test_every_package_has_its_folder_of_tests_or_a_listed_reason() -> None:
    missing = [p for p in packages() if not has_tests(p) and p not in ELSEWHERE]
    assert missing == [], f"add tests/<package>/ or a reason to ELSEWHERE: {missing}"


def test_every_listed_reason_is_still_needed() -> None:
    stale = [p for p in ELSEWHERE if p not in packages() or has_tests(p)]
    assert stale == []


def test_no_test_file_is_left_at_the_top_but_a_top_module_s() -> None:
    """`tests/test_X.py` tests `ore_core/X.py`: the rest is in the folder of its package."""
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    strays = [
        path.name
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if not any(path.stem.removeprefix("test_").startswith(m) for m in modules)
        and path.name not in TOP_LEVEL_OTHERS
    ]
    assert strays == []
