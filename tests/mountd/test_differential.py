"""Differential test: random POSIX operation sequences give the same results on a mount and on
tmpfs, step by step.

Theory of operation
-------------------
Hypothesis draws a sequence of operations (create with flags, write at offsets, append, read,
truncate, mkdir, rmdir, unlink, rename with and without flags, link, symlink, readlink, chmod,
utime, stat, lstat, listdir, and reads/writes/ftruncate/fstat through descriptors held open across
the other steps) over a tiny namespace (three names, two levels) seeded with a small tree, so
collisions, non-empty directories, files used as parents, symlink loops and open files whose name
was unlinked or renamed over happen often. Each operation is applied to the mount and to a tmpfs
directory; its outcome (value, or errno name) must be equal. Stat results are compared on the
fields both must agree on: kind, size (not for directories, whose size is filesystem-specific),
permission bits and link count. After the sequence both trees must snapshot equal (content, modes,
symlink targets).

The one allowed difference: RENAME_EXCHANGE may be refused with EINVAL by a mount (the issue
allows it); then it is not applied to the reference either, so the trees stay comparable.

One mount per session (the ``roots`` fixture); each example starts by emptying both working
directories through their own filesystem and seeding them, except on ``cow_lower``: there each
example gets a new directory of the copy-on-write mount's lower layer, seeded on the host, so
its steps change lower files and directories (copy-up, whiteouts, renames of lower entries).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import trees
from .conftest import Roots, kind_params
from .syscalls import RENAME_EXCHANGE, RENAME_NOREPLACE, outcome, renameat2

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
PATHS = NAMES + tuple(f"{x}/{y}" for x in NAMES[:2] for y in NAMES)
MODES = (0o644, 0o600, 0o755, 0o700, 0o000, 0o777, 0o4755)
DIFF_KINDS = ("tmpfs", "temp", "temp_handles", "dir_rw", "union", "union_host", "cow", "cow_lower")
# CI runs a bounded number; soak locally with e.g. AGENTROOT_DIFF_EXAMPLES=2000.
MAX_EXAMPLES = int(os.environ.get("AGENTROOT_DIFF_EXAMPLES", "60"))

# Top-level names twice as often: nested paths fail with ENOENT until their parent exists.
paths = st.sampled_from(PATHS + NAMES)
modes = st.sampled_from(MODES)
offsets = st.sampled_from((0, 1, 5, 100, 4095, 4096, 70_000))
sizes = st.sampled_from((0, 1, 3, 10, 4096, 100_000))
payloads = st.binary(min_size=0, max_size=64) | st.sampled_from((b"x" * 5000, b"\0" * 3))


@dataclass
class Place:
    """Where a sequence runs: the working directory and the descriptors its steps hold open."""

    base: Path
    fds: dict[int, int] = field(default_factory=dict)

    def fd(self, slot: int) -> int:
        if slot not in self.fds:
            raise OSError(errno.EBADF, "no descriptor held in this slot")
        return self.fds[slot]

    def close_all(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


@dataclass(frozen=True)
class Op:
    """One operation; ``run(at)`` performs it in ``at`` and returns a comparable value."""

    def run(self, at: Place) -> object:
        raise NotImplementedError


@dataclass(frozen=True)
class Create(Op):
    path: str
    exclusive: bool
    truncate: bool
    mode: int

    def run(self, at: Place) -> object:
        flags = os.O_WRONLY | os.O_CREAT
        flags |= os.O_EXCL if self.exclusive else 0
        flags |= os.O_TRUNC if self.truncate else 0
        os.close(os.open(at.base / self.path, flags, self.mode))
        return None


@dataclass(frozen=True)
class Open(Op):
    path: str
    access: int
    truncate: bool

    def run(self, at: Place) -> object:
        flags = self.access | (os.O_TRUNC if self.truncate else 0)
        os.close(os.open(at.base / self.path, flags))
        return None


@dataclass(frozen=True)
class Write(Op):
    path: str
    offset: int
    data: bytes

    def run(self, at: Place) -> object:
        fd = os.open(at.base / self.path, os.O_WRONLY)
        try:
            return os.pwrite(fd, self.data, self.offset)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Append(Op):
    path: str
    data: bytes

    def run(self, at: Place) -> object:
        fd = os.open(at.base / self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, self.data)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Read(Op):
    path: str
    offset: int
    size: int

    def run(self, at: Place) -> object:
        fd = os.open(at.base / self.path, os.O_RDONLY)
        try:
            return os.pread(fd, self.size, self.offset)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Truncate(Op):
    path: str
    size: int

    def run(self, at: Place) -> object:
        os.truncate(at.base / self.path, self.size)
        return os.stat(at.base / self.path).st_size


@dataclass(frozen=True)
class Mkdir(Op):
    path: str
    mode: int

    def run(self, at: Place) -> object:
        os.mkdir(at.base / self.path, self.mode)
        return None


@dataclass(frozen=True)
class Rmdir(Op):
    path: str

    def run(self, at: Place) -> object:
        os.rmdir(at.base / self.path)
        return None


@dataclass(frozen=True)
class Unlink(Op):
    path: str

    def run(self, at: Place) -> object:
        os.unlink(at.base / self.path)
        return None


@dataclass(frozen=True)
class Rename(Op):
    src: str
    dst: str
    flags: int

    def run(self, at: Place) -> object:
        if self.flags:
            renameat2(at.base / self.src, at.base / self.dst, self.flags)
        else:
            os.rename(at.base / self.src, at.base / self.dst)
        return None


@dataclass(frozen=True)
class Link(Op):
    src: str
    dst: str

    def run(self, at: Place) -> object:
        os.link(at.base / self.src, at.base / self.dst, follow_symlinks=False)
        return None


@dataclass(frozen=True)
class Symlink(Op):
    target: str
    path: str

    def run(self, at: Place) -> object:
        os.symlink(self.target, at.base / self.path)
        return None


@dataclass(frozen=True)
class Readlink(Op):
    path: str

    def run(self, at: Place) -> object:
        return os.readlink(at.base / self.path)


@dataclass(frozen=True)
class Chmod(Op):
    path: str
    mode: int

    def run(self, at: Place) -> object:
        os.chmod(at.base / self.path, self.mode)
        return None


def _fields(st_: os.stat_result) -> tuple[object, ...]:
    kind = stat.S_IFMT(st_.st_mode)
    size = None if stat.S_ISDIR(st_.st_mode) else st_.st_size
    return (kind, size, oct(stat.S_IMODE(st_.st_mode)), st_.st_nlink)


@dataclass(frozen=True)
class Stat(Op):
    path: str
    follow: bool

    def run(self, at: Place) -> object:
        return _fields(
            os.stat(at.base / self.path) if self.follow else os.lstat(at.base / self.path)
        )


@dataclass(frozen=True)
class Listdir(Op):
    path: str

    def run(self, at: Place) -> object:
        return sorted(os.listdir(at.base / self.path))


@dataclass(frozen=True)
class Utime(Op):
    path: str
    ns: int

    def run(self, at: Place) -> object:
        os.utime(at.base / self.path, ns=(self.ns, self.ns))
        st_ = os.stat(at.base / self.path)
        return (st_.st_atime_ns, st_.st_mtime_ns)


# Held descriptors: open files that outlive unlink, rename-over and truncate of their name.


@dataclass(frozen=True)
class Hold(Op):
    slot: int
    path: str
    access: int

    def run(self, at: Place) -> object:
        fd = os.open(at.base / self.path, self.access)
        if self.slot in at.fds:
            os.close(at.fds.pop(self.slot))
        at.fds[self.slot] = fd
        return None


@dataclass(frozen=True)
class Release(Op):
    slot: int

    def run(self, at: Place) -> object:
        os.close(at.fd(self.slot))
        del at.fds[self.slot]
        return None


@dataclass(frozen=True)
class FdWrite(Op):
    slot: int
    offset: int
    data: bytes

    def run(self, at: Place) -> object:
        return os.pwrite(at.fd(self.slot), self.data, self.offset)


@dataclass(frozen=True)
class FdRead(Op):
    slot: int
    offset: int
    size: int

    def run(self, at: Place) -> object:
        return os.pread(at.fd(self.slot), self.size, self.offset)


@dataclass(frozen=True)
class FdTruncate(Op):
    slot: int
    size: int

    def run(self, at: Place) -> object:
        os.ftruncate(at.fd(self.slot), self.size)
        return os.fstat(at.fd(self.slot)).st_size


@dataclass(frozen=True)
class FdStat(Op):
    slot: int

    def run(self, at: Place) -> object:
        # Link count left out: an unlinked open file's count is not kept by path-based trees.
        return _fields(os.fstat(at.fd(self.slot)))[:3]


# Symlink targets stay inside the working directory: names relative to the link's directory.
targets = st.sampled_from((*NAMES, "a/b", "b/c", "missing"))

slots = st.sampled_from((0, 1))

operations: st.SearchStrategy[Op] = st.one_of(
    st.builds(Create, paths, st.booleans(), st.booleans(), modes),
    st.builds(Open, paths, st.sampled_from((os.O_RDONLY, os.O_WRONLY, os.O_RDWR)), st.booleans()),
    st.builds(Write, paths, offsets, payloads),
    st.builds(Append, paths, payloads),
    st.builds(Read, paths, offsets, sizes),
    st.builds(Truncate, paths, sizes),
    st.builds(Mkdir, paths, modes),
    st.builds(Rmdir, paths),
    st.builds(Unlink, paths),
    st.builds(Rename, paths, paths, st.sampled_from((0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE))),
    st.builds(Symlink, targets, paths),
    st.builds(Link, paths, paths),
    st.builds(Readlink, paths),
    st.builds(Chmod, paths, modes),
    st.builds(Stat, paths, st.booleans()),
    st.builds(Listdir, st.sampled_from(("", *NAMES[:2]))),
    st.builds(Utime, paths, st.sampled_from((0, 1_234_567_891_123_456_789, 10**18 + 1))),
    st.builds(Hold, slots, paths, st.sampled_from((os.O_RDONLY, os.O_WRONLY, os.O_RDWR))),
    st.builds(Release, slots),
    st.builds(FdWrite, slots, offsets, payloads),
    st.builds(FdRead, slots, offsets, sizes),
    st.builds(FdTruncate, slots, sizes),
    st.builds(FdStat, slots),
)


def empty(base: Path) -> None:
    """Remove everything under ``base`` through its own filesystem."""
    for entry in os.scandir(base):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    assert os.listdir(base) == []


# Every example starts from this tree, so early steps meet existing files and directories.
SEED: tuple[Op, ...] = (
    Mkdir("a", 0o755),
    Create("b", False, False, 0o644),
    Write("b", 0, b"hello"),
    Create("a/a", False, False, 0o600),
    Write("a/a", 0, b"x" * 5000),
)


def seed(base: Path) -> None:
    place = Place(base)
    try:
        for op in SEED:
            op.run(place)
    finally:
        place.close_all()


def check_same(mounted: Path, reference: Path, steps: list[Op], *, seeded: bool = False) -> None:
    """``steps`` give the same outcomes in ``mounted`` and ``reference``, each emptied and seeded
    first (``mounted`` is left as it is when ``seeded``: filled behind the mount)."""
    if not seeded:
        empty(mounted)
        seed(mounted)
    empty(reference)
    seed(reference)
    places = Place(mounted), Place(reference)
    try:
        for i, op in enumerate(steps):
            got = outcome(_bound(op, places[0]))
            if isinstance(op, Rename) and op.flags == RENAME_EXCHANGE and got == ("err", "EINVAL"):
                continue  # refusing an exchange is allowed; the reference does not do it either
            want = outcome(_bound(op, places[1]))
            assert got == want, f"step {i}: {op}: mount {got} != tmpfs {want}"
    finally:
        for place in places:
            place.close_all()
    assert trees.snapshot(mounted, mtimes=False) == trees.snapshot(reference, mtimes=False)


def _bound(op: Op, at: Place) -> Callable[[], object]:
    return lambda: op.run(at)


Workplace = Callable[[], tuple[Path, bool]]


@pytest.fixture(params=kind_params(DIFF_KINDS))
def pair(request: pytest.FixtureRequest, roots: Roots) -> tuple[Workplace, Path]:
    """Where each example works in the kind under test (a directory, and whether it is seeded
    already), and a working directory on the tmpfs reference."""
    reference = roots.fresh("tmpfs")
    if request.param == "cow_lower":
        # A new directory of the lower layer per example, seeded on the host: every step meets
        # lower files and directories (copy-up, whiteouts), and none inherits the last one's.
        def lower() -> tuple[Path, bool]:
            host, mounted = roots.fresh_lower()
            seed(host)
            return mounted, True

        return lower, reference
    mounted = roots.fresh(request.param)
    return (lambda: (mounted, False)), reference


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(operations, min_size=1, max_size=30))
def test_same_results_as_tmpfs(pair: tuple[Workplace, Path], steps: list[Op]) -> None:
    workplace, reference = pair
    mounted, seeded = workplace()
    check_same(mounted, reference, steps, seeded=seeded)


def test_namespace_sanity(roots: Roots) -> None:
    # The harness itself: two tmpfs directories agree on a sequence that hits many errnos.
    a, b = roots.fresh("tmpfs"), roots.fresh("tmpfs")
    steps: list[Op] = [
        Mkdir("a", 0o755),
        Create("a/b", True, False, 0o644),
        Create("a/b", True, False, 0o644),
        Rmdir("a"),
        Unlink("a"),
        Write("a/b", 4096, b"x"),
        Symlink("a", "b"),
        Stat("b/b", True),
        Rename("a", "b/c", 0),
        Symlink("c", "c"),
        Stat("c", True),
    ]
    check_same(a, b, steps)
    assert outcome(lambda: Stat("c", True).run(Place(a))) == ("err", errno.errorcode[errno.ELOOP])
