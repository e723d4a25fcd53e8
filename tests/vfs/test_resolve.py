"""The resolver against the kernel: random symlink graphs built in a real directory, each path
resolved by :func:`vfs._resolve.resolution` (driven with ``lstat``/``readlink`` on that
directory) and by ``openat2(RESOLVE_IN_ROOT)``, which resolves as if the directory were ``/``.
Both must reach the same real path, or fail with the same errno."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vfs._disk import O_PATH, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, openat2
from vfs._errors import PathError
from vfs._resolve import Lstat, Readlink, Resolved, drive_sync, resolution
from vfs._types import Kind

NAMES = ["a", "b", "c", "l1", "l2", "l3"]


def kind_at(root: str, path: str) -> Kind:
    try:
        mode = os.lstat(root + path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "directory" if stat.S_ISDIR(mode) else "file"


def ours(root: str, path: str, follow: bool) -> Resolved | int:
    found = drive_sync(
        resolution(path, follow=follow),
        lambda p: kind_at(root, p),
        lambda p: os.readlink(root + p),
    )
    try:
        return found.check(path)
    except PathError as error:
        assert error.path == path
        return error.errno


def kernels(root: str, path: str, follow: bool) -> str | int:
    """The real tree path the kernel reaches, or its errno."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        flags = O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        try:
            found = openat2(
                fd, path.lstrip("/") or ".", flags, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
            )
        except OSError as error:
            return error.errno
        try:
            real = os.readlink(f"/proc/self/fd/{found}")
        finally:
            os.close(found)
    finally:
        os.close(fd)
    base = os.path.realpath(root)
    return "/" if real == base else real[len(base) :]


def agree(root: str, path: str, follow: bool) -> None:
    mine = ours(root, path, follow)
    theirs = kernels(root, path, follow)
    if isinstance(mine, Resolved) and mine.kind == "missing":
        # The kernel cannot open what is not there; the parent must resolve alike.
        assert theirs == errno.ENOENT, (path, follow, mine, theirs)
        return
    if isinstance(theirs, int):
        assert mine == theirs, (path, follow, mine, errno.errorcode.get(theirs))
        return
    assert isinstance(mine, Resolved), (path, follow, errno.errorcode.get(mine), theirs)
    assert mine.path == theirs, (path, follow, mine, theirs)


targets = st.one_of(
    st.lists(st.sampled_from([*NAMES, "..", ".", ""]), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from([*NAMES, ".."]), min_size=1, max_size=4).map(
        lambda parts: "/" + "/".join(parts)
    ),
)
entries = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(lambda p: "/" + "/".join(p)),
        st.one_of(st.just(("dir", "")), st.just(("file", "")), targets.map(lambda t: ("link", t))),
    ),
    min_size=1,
    max_size=14,
)
queries = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), min_size=0, max_size=4).map(lambda p: "/" + "/".join(p)),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def build(root: Path, layout: list[tuple[str, tuple[str, str]]]) -> None:
    for path, (kind, target) in layout:
        host = root / path.lstrip("/")
        if not host.parent.is_dir() or os.path.lexists(host):
            continue  # no parent directory there (or the name is taken): skip the entry
        if kind == "dir":
            host.mkdir()
        elif kind == "file":
            host.write_text("x")
        elif target:
            host.symlink_to(target)


@settings(max_examples=200, deadline=None)
@given(layout=entries, asked=queries)
def test_the_resolver_reaches_what_the_kernel_reaches(
    layout: list[tuple[str, tuple[str, str]]], asked: list[tuple[str, bool]]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        build(root, layout)
        for path, follow in asked:
            agree(str(root), path, follow)


def test_dotdot_in_a_target_goes_up_from_the_real_directory(tmp_path: Path) -> None:
    """The regression that let a policy be walked around: ``/l -> y/..`` with
    ``/y -> /secret/inner`` is ``/secret``, not ``/``."""
    (tmp_path / "secret" / "inner").mkdir(parents=True)
    (tmp_path / "secret" / "data.txt").write_text("TOP SECRET\n")
    (tmp_path / "y").symlink_to("/secret/inner")
    (tmp_path / "l").symlink_to("y/..")
    found = ours(str(tmp_path), "/l/data.txt", True)
    assert found == Resolved("/secret/data.txt", "file", True)
    agree(str(tmp_path), "/l/data.txt", True)


@pytest.mark.parametrize(
    ("path", "follow", "expected"),
    [
        ("/loop", True, errno.ELOOP),
        ("/loop", False, Resolved("/loop", "symlink", False)),
        ("/file/x", True, errno.ENOTDIR),
        ("/missing/x", True, errno.ENOENT),
        ("/missing", True, Resolved("/missing", "missing", False)),
        ("/dangling", True, Resolved("/nowhere", "missing", True)),
        ("/dot", True, Resolved("/", "directory", True)),
        ("/up/up/up", True, Resolved("/", "directory", True)),
        ("/", False, Resolved("/", "directory", False)),
    ],
)
def test_errors_and_edges(tmp_path: Path, path: str, follow: bool, expected: object) -> None:
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to("/nowhere")
    (tmp_path / "dot").symlink_to(".")
    (tmp_path / "up").symlink_to("..")
    assert ours(str(tmp_path), path, follow) == expected
    agree(str(tmp_path), path, follow)


def test_the_resolver_asks_and_never_touches_anything() -> None:
    steps = resolution("/a/b", follow=True)
    assert next(steps) == Lstat("/a")
    assert steps.send("symlink") == Readlink("/a")
    assert steps.send("/x") == Lstat("/x")
    assert steps.send("directory") == Lstat("/x/b")
    with pytest.raises(StopIteration) as done:
        steps.send("file")
    assert done.value.value == Resolved("/x/b", "file", True)
