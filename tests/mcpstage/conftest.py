"""Places to run the protocol in: a tmpfs directory and a ``mountd`` mount, each with real repos.

Theory of operation
-------------------
Every protocol test takes ``repo`` and so runs twice: ``tmpfs`` (a directory under ``/dev/shm``:
the kernel's own filesystem, the reference) and ``mount`` (a ``mountd`` mount of
``cow_fs(dir_fs(host))``, where ``host`` holds the template repository; the tests' copies are
made through the mount, so they live in the copy-on-write upper, and git, the protocol and the
checks all go through FUSE). The mount is set up once per session on first use and fails every
mount test if it cannot come up (never a skip). Mount tests carry the ``mount`` marker.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import builders
from .support import Repo, copy_template, make_template


class Places:
    """The session's places, set up on first use."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._bases: dict[str, Path] = {}
        self._templates: dict[str, Path] = {}
        self._host_templates: dict[str, Path] = {}
        self._counter = itertools.count()
        self._failed: dict[str, BaseException] = {}
        self._host = Path(tempfile.mkdtemp(prefix="mcpstage-tests-", dir="/dev/shm"))
        self._stack.callback(shutil.rmtree, self._host, ignore_errors=True)

    def close(self) -> None:
        self._stack.close()

    def _setup(self, place: str) -> None:
        if place == "tmpfs":
            base = self._host / "tmpfs"
            base.mkdir()
            self._templates[place] = self._host_templates[place] = make_template(base)
            self._bases[place] = base / "work"
        elif place == "mount":
            from tests.mountd.mounting import mount_root

            lower = self._host / "lower"
            lower.mkdir()
            self._host_templates[place] = make_template(lower)
            mountpoint = self._host / "mnt"
            mountpoint.mkdir()
            root = self._stack.enter_context(
                mount_root(functools.partial(builders.cow_over, str(lower)), mountpoint)
            )
            self._templates[place] = root / "tpl"
            self._bases[place] = root / "work"
        else:
            raise AssertionError(place)
        self._bases[place].mkdir()

    def _ready(self, place: str) -> None:
        if place in self._failed:
            # Fail every later test of this place at once instead of waiting for it again.
            raise RuntimeError(f"{place} failed to set up earlier") from self._failed[place]
        if place not in self._bases:
            try:
                self._setup(place)
            except BaseException as error:
                self._failed[place] = error
                raise

    def fresh(self, place: str) -> Repo:
        self._ready(place)
        dest = self._bases[place] / f"r{next(self._counter)}"
        return copy_template(self._templates[place], dest, mounted=place == "mount")

    def template(self, place: str) -> Path:
        self._ready(place)
        return self._templates[place]

    def host_template(self, place: str) -> Path:
        """The template on the host: for the mount, in the lower the mount reads (never writes)."""
        self._ready(place)
        return self._host_templates[place]


PLACES = [
    pytest.param("tmpfs", id="tmpfs"),
    pytest.param("mount", id="mount", marks=pytest.mark.mount),
]


@pytest.fixture(scope="session")
def places() -> Iterator[Places]:
    session = Places()
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(params=PLACES)
def place(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def repo(places: Places, place: str) -> Repo:
    """A fresh repository with a linked worktree, in this test's place."""
    return places.fresh(place)
