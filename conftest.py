"""The repository's tests (core, plugins, conduits) use the ore pytest kit.

The kit is opt-in (see `ore_core.testing`); opting in here, at the top level, covers
every test directory in `testpaths`.

Two rules hold for the whole suite here:

- no test depends on timing: Hypothesis runs without deadlines (the "ore" profile);
- no test touches the user's ore state or configuration: every test gets its own
  XDG_STATE_HOME / XDG_CONFIG_HOME (processes it starts inherit them) and no `ORE_*`
  variable of the caller's shell. For the session the "user's" directories point at a
  sentinel directory, and the run fails if anything was written there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

pytest_plugins = ["ore_core.testing"]

settings.register_profile("ore", deadline=None)
settings.load_profile("ore")

USER_DIRS = ("XDG_STATE_HOME", "XDG_CONFIG_HOME")

_SENTINEL = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Point the user's state and config directories at an empty sentinel directory."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's, checked by it
        config.stash[_SENTINEL] = Path(os.environ[USER_DIRS[0]]).parent
        return
    sentinel = Path(tempfile.mkdtemp(prefix="ore-user-dirs-"))
    config.stash[_SENTINEL] = sentinel
    for variable in USER_DIRS:
        os.environ[variable] = str(sentinel / variable.lower())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a test wrote into the session's stand-in for the user's directories."""
    sentinel = session.config.stash.get(_SENTINEL, None)
    if sentinel is None or hasattr(session.config, "workerinput"):
        return
    written = sorted(str(path.relative_to(sentinel)) for path in sentinel.rglob("*"))
    if written:
        session.config.get_terminal_writer().line(
            f"tests wrote into the user's ore directories (stood in by {sentinel}): "
            + ", ".join(written),
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _own_user_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This test's own XDG_STATE_HOME / XDG_CONFIG_HOME, and no `ORE_*` of the caller's."""
    for name in [name for name in os.environ if name.upper().startswith("ORE_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "user-dirs"
    for variable in USER_DIRS:
        monkeypatch.setenv(variable, str(home / variable.lower()))


@pytest.fixture
def user_dirs_sentinel(request: pytest.FixtureRequest) -> Path:
    """The session's stand-in for the user's directories (must stay empty)."""
    return request.config.stash[_SENTINEL]
