"""Fixtures for every test: state that must not leak between tests or into the user's home."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_sessions(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Each test keeps the default tree's sessions (mountd._sessions) in a directory of its own."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


@pytest.fixture
def deep_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` for a test that makes a tree deeper than Python's recursion limit: emptied
    with ``rm`` afterwards, since pytest's own clean-up of old directories recurses per level."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(tmp_path)], check=False)
    tmp_path.mkdir(exist_ok=True)
