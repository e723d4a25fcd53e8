"""Roots for the mount suites: a tmpfs reference and every mounted composition, as paths.

Theory of operation
-------------------
The POSIX, tools and differential suites are written once over "a directory path". A *kind*
names where that path lives:

- ``tmpfs`` / ``tmpfs_ro``: the kernel's own tmpfs, the reference every check must pass on
  (``tmpfs_ro`` is a tmpfs we mount, fill and remount read-only);
- ``temp``: ``temp_fs()``; ``dir_rw`` / ``dir_ro``: ``dir_fs`` over a host directory;
- ``union`` / ``union_host``: one mount of ``union_fs({"/": temp_fs(), "/host": dir_fs(host)})``,
  worked in under ``/`` and under ``/host`` respectively;
- ``cow`` / ``cow_lower``: one mount of ``cow_fs(dir_fs(host))`` (``mountd mount``'s default
  tree), worked in through the mount (directories the upper layer makes) and in directories made
  on the host before the test (the lower layer's: every change copies up or whites out);
- ``overlay``: ``overlay_fs`` of read-only layers (read checks only).

Mounting is expensive, so each kind is set up once per session, on first use, and torn down at
the end (:class:`Roots`). Each test gets a fresh directory of its own inside it (``rw_root``), or
the shared sample tree it must not change (``root``, ``ro_root``). A kind that fails to mount
fails every test that asks for it: mount tests never skip.

Mounted kinds carry the ``mount`` marker; the tmpfs references do not, so they run anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import compositions, trees

# temp_handles: temp_fs with OPEN/RELEASE and file handles (MountOptions(files_by_inode=False)),
# what a tree that buffers writes, or a stock pyfuse3, always gets.
RW_KINDS = ("tmpfs", "temp", "temp_handles", "dir_rw", "union", "union_host", "cow", "cow_lower")
RO_KINDS = ("tmpfs_ro", "dir_ro", "overlay")
REFERENCE_KINDS = frozenset({"tmpfs", "tmpfs_ro"})


@dataclass(frozen=True)
class Root:
    """A directory to test in, and what it is."""

    kind: str
    path: Path
    writable: bool

    @property
    def mounted(self) -> bool:
        return self.kind not in REFERENCE_KINDS


def kind_params(kinds: tuple[str, ...]) -> list[object]:
    """``pytest.param`` per kind, with the ``mount`` marker on mounted ones."""
    return [
        pytest.param(kind, id=kind)
        if kind in REFERENCE_KINDS
        else pytest.param(kind, id=kind, marks=pytest.mark.mount)
        for kind in kinds
    ]


class Roots:
    """The session's roots, set up on first use (one mount per composition per session)."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._stack = contextlib.ExitStack()
        self._bases: dict[str, Path] = {}
        self._failed: dict[str, BaseException] = {}
        self._counter = itertools.count()

    def close(self) -> None:
        self._stack.close()

    def base(self, kind: str) -> Path:
        """The directory a kind is worked in (its sample tree lives at ``base/sample``)."""
        if kind in self._failed:
            # Fail every later test of this kind at once, instead of waiting for it again.
            raise RuntimeError(
                f"root kind {kind!r} failed to set up earlier in this session"
            ) from (self._failed[kind])
        if kind not in self._bases:
            try:
                self._bases[kind] = self._setup(kind)
            except BaseException as error:
                self._failed[kind] = error
                raise
        return self._bases[kind]

    def fresh(self, kind: str) -> Path:
        """A new empty directory inside a writable kind, made through it (for ``cow_lower``,
        made on the host: a directory of the lower layer)."""
        if kind == "cow_lower":
            return self.fresh_lower()[1]
        path = self.base(kind) / "work" / f"t{next(self._counter)}"
        path.mkdir(parents=True)
        return path

    def fresh_lower(self) -> tuple[Path, Path]:
        """A new empty directory of the ``cow`` mount's lower layer: where it is on the host (to
        fill behind the mount), and where it shows through the mount."""
        base = self.base("cow")
        name = f"t{next(self._counter)}"
        host = self._scratch / "host-cow" / "lower-work" / name
        host.mkdir(parents=True)
        return host, base / "lower-work" / name

    def sample(self, kind: str) -> Path:
        return self.base(kind) / "sample"

    def host(self, kind: str, path: Path) -> Path:
        """Where ``path``, inside a host-directory kind's mount, lives on the host."""
        hosts = {"dir_rw": "host-rw", "dir_ro": "host-ro"}
        return self._scratch / hosts[kind] / path.relative_to(self.base(kind))

    def _dir(self, name: str) -> Path:
        path = self._scratch / name
        path.mkdir()
        return path

    def _mount(self, build: Callable[[], object], name: str, options: object = None) -> Path:
        from .mounting import mount_root

        return self._stack.enter_context(mount_root(build, self._dir(f"mnt-{name}"), options))

    def _setup(self, kind: str) -> Path:
        if kind == "tmpfs":
            base = Path(tempfile.mkdtemp(prefix="agentroot-ref-", dir="/dev/shm"))
            self._stack.callback(shutil.rmtree, base, ignore_errors=True)
            _with_sample(base)
            return base
        if kind == "tmpfs_ro":
            base = self._dir("tmpfs-ro")
            _run("mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(base))
            self._stack.callback(_run, "umount", "-l", str(base))
            _with_sample(base)
            _run("mount", "-o", "remount,ro", str(base))
            return base
        if kind == "temp":
            return _with_sample(self._mount(compositions.temp, "temp"))
        if kind == "temp_handles":
            from mountd import MountOptions

            options = MountOptions(files_by_inode=False)
            return _with_sample(self._mount(compositions.temp, "temp-handles", options))
        if kind == "dir_rw":
            host = self._dir("host-rw")
            return _with_sample(self._mount(functools.partial(compositions.dir_rw, host), "dir-rw"))
        if kind == "dir_ro":
            host = self._dir("host-ro")
            _with_sample(host)
            return self._mount(functools.partial(compositions.dir_ro, host), "dir-ro")
        if kind == "union":
            host = self._dir("host-union")
            return _with_sample(self._mount(functools.partial(compositions.union, host), "union"))
        if kind == "union_host":
            return _with_sample(self.base("union") / "host")
        if kind == "cow":
            host = self._dir("host-cow")
            _with_sample(host)  # in the lower layer
            return self._mount(functools.partial(compositions.cow, host), "cow")
        if kind == "cow_lower":
            return self.base("cow")
        if kind == "overlay":
            lower, upper = self._dir("overlay-lower"), self._dir("overlay-upper")
            compositions.fill_overlay_layers(lower, upper)
            return self._mount(functools.partial(compositions.overlay, lower, upper), "overlay")
        raise AssertionError(f"unknown root kind {kind!r}")


def _with_sample(base: Path) -> Path:
    sample = base / "sample"
    sample.mkdir()
    trees.write_tree(sample)
    return base


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=30, capture_output=True)


@pytest.fixture(scope="session")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Roots]:
    session = Roots(tmp_path_factory.mktemp("roots"))
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(params=kind_params(RW_KINDS + RO_KINDS))
def root(request: pytest.FixtureRequest, roots: Roots) -> Root:
    """Every kind, at the sample tree (``trees.SAMPLE``): for read checks only."""
    kind: str = request.param
    return Root(kind, roots.sample(kind), kind in RW_KINDS)


@pytest.fixture(params=kind_params(RW_KINDS))
def rw_root(request: pytest.FixtureRequest, roots: Roots) -> Root:
    """Every writable kind, at a fresh empty directory of this test's own."""
    kind: str = request.param
    return Root(kind, roots.fresh(kind), True)


@pytest.fixture(params=kind_params(RO_KINDS))
def ro_root(request: pytest.FixtureRequest, roots: Roots) -> Root:
    """Every read-only kind, at the sample tree."""
    kind: str = request.param
    return Root(kind, roots.sample(kind), False)


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A host tmpfs directory outside every mount (for host-side copies and references)."""
    path = Path(tempfile.mkdtemp(prefix="agentroot-scratch-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
