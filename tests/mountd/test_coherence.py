"""Coherence: changes through the tree's API and through the mount, interleaved at random, and
after every step the mount lists and reads exactly what the tree holds.

Theory of operation
-------------------
The kernel caches entries, attributes, pages and (with the patched pyfuse3) whole directory
listings for minutes; what keeps it right is the kernel's own bookkeeping for changes made through
the mount and ``mountd._invalidate`` for changes made through the API. Hypothesis draws short
sequences of both kinds (writes, deletes, renames, hard links) over a tiny namespace, with "look"
steps between them (and one at the end) where every directory's listing and every file's bytes are
read through the mount (so they are cached for what follows) and compared with the tree's answer,
and "peek" steps that list the root alone (caching its listing without looking up any name
beneath). Trees: ``temp_fs``, ``dir_fs``, ``host_fs`` (an eight-verb tree, whose directories have
no modification time that moves), ``cow_fs`` over a read-only host directory, and a union with a
host directory mounted at ``/d``.

Each example mounts in this process (:func:`mountd.mounted`) and touches the mount only from
worker threads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vfs
from mountd import mounted
from vfs._capabilities import make_link

pytestmark = [pytest.mark.mount, pytest.mark.timeout(300)]

# CI runs a bounded number; soak locally with e.g. AGENTROOT_COHERENCE_EXAMPLES=500.
MAX_EXAMPLES = int(os.environ.get("AGENTROOT_COHERENCE_EXAMPLES", "15"))
DIRS = ("/", "/d", "/d/e")
FILES = ("/w", "/d/x", "/d/y", "/d/e/z")
payloads = st.sampled_from((b"", b"one", b"two!", b"x" * 5000))

steps = st.lists(
    st.one_of(
        st.tuples(st.just("api_write"), st.sampled_from(FILES), payloads),
        st.tuples(st.just("api_delete"), st.sampled_from((*FILES, "/d/e", "/d"))),
        st.tuples(st.just("mount_write"), st.sampled_from(FILES), payloads),
        st.tuples(st.just("mount_unlink"), st.sampled_from(FILES)),
        st.tuples(st.just("mount_rename"), st.sampled_from(FILES), st.sampled_from(FILES)),
        st.tuples(st.just("mount_link"), st.sampled_from(FILES), st.sampled_from(FILES)),
        st.tuples(st.just("api_link"), st.sampled_from(FILES), st.sampled_from(FILES)),
        st.tuples(st.just("look")),
        st.tuples(st.just("look")),
        st.tuples(st.just("peek")),
    ),
    min_size=1,
    max_size=12,
)


def _temp(root: Path) -> vfs.PosixFileSystem:
    return vfs.temp_fs()


def _dir(root: Path) -> vfs.PosixFileSystem:
    host = root / "host"
    host.mkdir()
    return vfs.dir_fs(host)


def _host(root: Path) -> object:
    return vfs.host_fs(vfs.InMemoryHostFiles({}, scope="s"), "s")


def _cow(root: Path) -> object:
    host = root / "host"
    host.mkdir()
    (host / "d").mkdir()
    (host / "d" / "x").write_bytes(b"from the host")
    return vfs.cow_fs(vfs.dir_fs(host, read_only=True))


def _union(root: Path) -> object:
    host = root / "host"
    host.mkdir()
    return vfs.union_fs({"/": vfs.temp_fs(), "/d": vfs.dir_fs(host)})


TREES: dict[str, Callable[[Path], object]] = {
    "temp": _temp,
    "dir": _dir,
    "host": _host,
    "cow": _cow,
    "union": _union,
}


def _listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def _mount_view(mnt: Path) -> dict[str, object]:
    """Every directory's names and every file's bytes, read through the mount."""
    view: dict[str, object] = {}
    for d in DIRS:
        try:
            view[d] = sorted(os.listdir(mnt / d.lstrip("/")))
        except (FileNotFoundError, NotADirectoryError):
            view[d] = None
    for f in FILES:
        try:
            view[f] = (mnt / f.lstrip("/")).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            view[f] = None
    return view


async def _tree_view(tree: vfs.FileSystem) -> dict[str, object]:
    view: dict[str, object] = {}
    for d in DIRS:
        info = await tree.stat(d)
        view[d] = (
            sorted([e.path.rpartition("/")[2] async for e in tree.list(d)])
            if info.kind == "directory"
            else None
        )
    for f in FILES:
        info = await tree.stat(f)
        if info.kind == "file":
            data = await tree.read(f)
            view[f] = data.encode() if isinstance(data, str) else data
        else:
            view[f] = None
    return view


def _mount_step(mnt: Path, step: tuple[object, ...]) -> None:
    kind, path = step[0], mnt / str(step[1]).lstrip("/")
    with contextlib.suppress(OSError):  # a missing parent, a name that is not there: no change
        if kind == "mount_write":
            payload = step[2]
            assert isinstance(payload, bytes)
            path.write_bytes(payload)
        elif kind == "mount_unlink":
            path.unlink()
        elif kind == "mount_rename":
            os.rename(path, mnt / str(step[2]).lstrip("/"))
        elif kind == "mount_link":  # EPERM where the tree has none
            os.link(path, mnt / str(step[2]).lstrip("/"))


async def _api_step(tree: vfs.FileSystem, step: tuple[object, ...]) -> None:
    kind, path = step[0], str(step[1])
    if kind == "api_write":
        payload = step[2]
        assert isinstance(payload, bytes)
        with contextlib.suppress(OSError):  # a file where a directory is needed
            await tree.write(path, payload)
    elif kind == "api_link":
        with contextlib.suppress(OSError):  # taken, missing, or a tree without links
            await make_link(tree, path, str(step[2]))
    else:
        with contextlib.suppress(OSError):
            await tree.delete(path)


@pytest.mark.parametrize("kind", sorted(TREES))
def test_api_and_mount_changes_interleaved_stay_coherent(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(steps=steps)
    def run(steps: list[tuple[object, ...]]) -> None:
        root = tmp_path_factory.mktemp("coherence")
        mnt = root / "mnt"
        mnt.mkdir()

        async def main() -> None:
            tree = TREES[kind](root)
            assert isinstance(tree, vfs.Watchable)
            async with mounted(tree, mnt) as mount:  # type: ignore[arg-type]
                # The reference is the tree as the mount serves it: for an eight-verb tree, a
                # view that keeps a directory emptied through the mount (POSIX) as pending.
                served = mount.tree
                for number, step in enumerate(steps, 1):
                    if str(step[0]).startswith("api_"):
                        await _api_step(tree, step)  # type: ignore[arg-type]
                    elif step[0] == "peek":  # the root's listing alone: no lookups beneath
                        seen_root = await trio.to_thread.run_sync(_listing, mnt)
                        assert seen_root == (await _tree_view(served))["/"], f"{steps[:number]}"
                    elif step[0] != "look":
                        await trio.to_thread.run_sync(_mount_step, mnt, step)
                    if step[0] == "look" or number == len(steps):
                        seen = await trio.to_thread.run_sync(_mount_view, mnt)
                        assert seen == await _tree_view(served), f"after {steps[:number]}"

        trio.run(main)

    run()


@pytest.mark.parametrize("kind", sorted(TREES))
def test_a_directory_removed_and_made_again_through_the_api_is_listed(
    tmp_path: Path, kind: str
) -> None:
    """The invalidator tells the kernel once about a directory the tree made on the way to an
    API write (not on every write beneath it); a listing in between must reset that."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = TREES[kind](tmp_path)
        assert isinstance(tree, vfs.Watchable)
        async with mounted(tree, mnt):  # type: ignore[arg-type]
            before = await trio.to_thread.run_sync(_listing, mnt)
            await tree.write("/n/x", "1")  # /n made on the way: the root's listing is dropped
            assert await trio.to_thread.run_sync(_listing, mnt) == sorted([*before, "n"])
            await tree.delete("/n/x")
            with contextlib.suppress(OSError):  # an eight-verb tree's /n is gone already
                await tree.delete("/n")
            assert await trio.to_thread.run_sync(_listing, mnt) == before  # cached without n
            assert not await trio.to_thread.run_sync((mnt / "n").exists)  # remembered missing
            await tree.write("/n/y", "2")  # /n made again: the kernel must hear of it again
            assert await trio.to_thread.run_sync(_listing, mnt / "n") == ["y"]
            assert await trio.to_thread.run_sync(_listing, mnt) == sorted([*before, "n"])
            await tree.write("/n/z", "3")  # beneath it, unseen: no news for the root
            assert await trio.to_thread.run_sync(_listing, mnt / "n") == ["y", "z"]

    trio.run(main)


@pytest.mark.parametrize("kind", sorted(TREES))
def test_a_directory_looked_up_as_missing_and_made_again_is_found(
    tmp_path: Path, kind: str
) -> None:
    """The same without listings: a lookup of the name between resets it too."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = TREES[kind](tmp_path)
        assert isinstance(tree, vfs.Watchable)
        async with mounted(tree, mnt):  # type: ignore[arg-type]
            await tree.write("/n/x", "1")
            assert await trio.to_thread.run_sync(_listing, mnt / "n") == ["x"]
            await tree.delete("/n/x")
            with contextlib.suppress(OSError):  # an eight-verb tree's /n is gone already
                await tree.delete("/n")
            assert not await trio.to_thread.run_sync((mnt / "n").exists)  # remembered missing
            await tree.write("/n/y", "2")
            assert await trio.to_thread.run_sync(_listing, mnt / "n") == ["y"]

    trio.run(main)


@pytest.mark.parametrize("kind", ["temp", "dir", "cow"])
def test_names_linked_through_the_api_share_one_inode_through_the_mount(
    kind: str, tmp_path: Path
) -> None:
    """A file the tree gave two names reaches the kernel as one inode (FileInfo.file_id), so a
    write through either name, from either side, is read back through the other."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = TREES[kind](tmp_path)
        await tree.write("/w", b"one")  # type: ignore[attr-defined]
        await make_link(tree, "/w", "/v")
        async with mounted(tree, mnt):  # type: ignore[arg-type]

            def look() -> tuple[bytes, bytes, bool]:
                same = os.stat(mnt / "w").st_ino == os.stat(mnt / "v").st_ino
                return (mnt / "w").read_bytes(), (mnt / "v").read_bytes(), same

            assert await trio.to_thread.run_sync(look) == (b"one", b"one", True)

            def write_through_the_mount() -> None:
                with open(mnt / "w", "r+b") as handle:
                    handle.write(b"TWO")

            await trio.to_thread.run_sync(write_through_the_mount)
            assert await trio.to_thread.run_sync(look) == (b"TWO", b"TWO", True)
            await tree.write("/v", b"three")  # type: ignore[attr-defined]
            assert await trio.to_thread.run_sync(look) == (b"three", b"three", True)

    trio.run(main)


def test_a_lower_files_two_names_are_two_files_in_a_copy_on_write_mount(tmp_path: Path) -> None:
    """Copy-up takes one name at a time, so the mount must not serve a lower file's hard links
    as one inode: a write through one name leaves the other showing the lower's bytes."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "a").write_bytes(b"lower")
    os.link(host / "a", host / "b")
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = vfs.cow_fs(vfs.dir_fs(host, read_only=True))
        async with mounted(tree, mnt):

            def write_a_read_b() -> tuple[bytes, bytes, bool]:
                assert (mnt / "b").read_bytes() == b"lower"  # cached
                (mnt / "a").write_bytes(b"copied up")
                same = os.stat(mnt / "a").st_ino == os.stat(mnt / "b").st_ino
                return (mnt / "a").read_bytes(), (mnt / "b").read_bytes(), same

            got = await trio.to_thread.run_sync(write_a_read_b)
            assert got == (b"copied up", b"lower", False)
        assert (host / "a").read_bytes() == b"lower"

    trio.run(main)


@pytest.mark.parametrize("kind", ["temp", "dir"])
def test_a_file_the_mount_knew_keeps_its_inode_when_the_api_gives_it_a_second_name(
    kind: str, tmp_path: Path
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = TREES[kind](tmp_path)
        await tree.write("/w", b"one")  # type: ignore[attr-defined]
        async with mounted(tree, mnt):  # type: ignore[arg-type]
            first = await trio.to_thread.run_sync(lambda: os.stat(mnt / "w"))
            await make_link(tree, "/w", "/v")

            def names() -> tuple[int, int, int]:
                w, v = os.stat(mnt / "w"), os.stat(mnt / "v")  # w first: its attributes moved
                return w.st_ino, v.st_ino, v.st_nlink

            assert await trio.to_thread.run_sync(names) == (first.st_ino, first.st_ino, 2)

    trio.run(main)


@pytest.mark.parametrize("kind", ["dir", "union"])
def test_an_api_write_reaches_every_name_the_kernel_knows_of_a_hard_linked_file(
    tmp_path: Path, kind: str
) -> None:
    """A name made through the mount, then given a second name through the API: the kernel
    holds the two names as two inodes (it learned the first before the file had another), and
    an API write through either must reach both."""

    async def main() -> None:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        tree = TREES[kind](tmp_path)
        assert isinstance(tree, vfs.PosixFileSystem)
        with contextlib.suppress(OSError):
            await tree.mkdir("/d")
        async with mounted(tree, mnt):  # type: ignore[arg-type]
            await trio.to_thread.run_sync((mnt / "d" / "y").write_bytes, b"")
            await make_link(tree, "/d/y", "/d/x")
            assert await trio.to_thread.run_sync(_mount_view, mnt) == await _tree_view(tree)
            await tree.write("/d/x", b"one")
            seen = await trio.to_thread.run_sync(_mount_view, mnt)
            assert (seen["/d/x"], seen["/d/y"]) == (b"one", b"one")

    trio.run(main)
