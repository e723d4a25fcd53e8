"""Applying a checkpoint: ``cow.apply(checkpoint=N)`` and ``cow.checkpoint_view(N)``.

The checkpoint's view goes through the one apply (its changes, checked against what N shadowed),
into a real host directory; the live tree goes on showing the same names and bytes, and what it
holds equal to the directory afterwards is no longer a change. Both kinds of cow: an in-memory
upper and a durable one (a host directory's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vfs

from .eightverb import run
from .test_conformance import write_host_tree

SEED: dict[str, str | bytes] = {
    "/a.txt": "a\n",
    "/old.txt": "old\n",
    "/d/x.txt": "x\n",
    "/d/y.txt": "y\n",
}
KINDS = ("memory", "durable")


def make(tmp_path: Path, kind: str) -> tuple[vfs.CowFileSystem, Path]:
    host = write_host_tree(tmp_path / "lower", SEED)
    upper = None
    if kind == "durable":
        (tmp_path / "upper").mkdir()
        upper = vfs.dir_fs(str(tmp_path / "upper"))
    return vfs.cow_fs(vfs.dir_fs(str(host)), upper), host


async def shown(tree: vfs.FileSystem) -> dict[str, bytes | str]:
    """Every entry of ``tree``: a file's bytes, a directory's mark."""
    found: dict[str, bytes | str] = {}
    posix = vfs.posix_view(tree)

    async def walk(directory: str) -> None:
        async for entry in tree.list(directory):
            if entry.kind == "directory":
                found[entry.path] = "dir"
                await walk(entry.path)
            else:
                handle = await posix.open(entry.path)
                try:
                    found[entry.path] = await handle.read(0, 1 << 20)
                finally:
                    await handle.close()

    await walk("/")
    return found


def on_host(root: Path) -> dict[str, bytes | str]:
    return {
        "/" + str(p.relative_to(root)): "dir" if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


async def changes(tree: vfs.CowFileSystem) -> list[tuple[str, str]]:
    return [(c.kind[0].upper(), c.path) async for c in tree.changes()]


@pytest.mark.parametrize("kind", KINDS)
def test_the_live_tree_keeps_showing_what_it_showed(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree, host = make(tmp_path, kind)
        await tree.checkpoint(label="start")
        await tree.write("/a.txt", "a from 2\n")
        await tree.write("/new.txt", "new\n")
        await tree.delete("/old.txt")
        await tree.delete("/d/x.txt")
        await tree.delete("/d/y.txt")
        await tree.rmdir("/d")
        second = await tree.checkpoint()
        await tree.rewind(1)  # the live tree shows the lower everywhere 2 changed
        live = await shown(tree)

        view = await tree.checkpoint_view(second.number)
        assert isinstance(view, vfs.CowFileSystem)
        assert await view.read("/a.txt") == "a from 2\n"
        assert await changes(view) == [
            ("M", "/a.txt"),
            ("D", "/d"),
            ("D", "/d/x.txt"),
            ("D", "/d/y.txt"),
            ("A", "/new.txt"),
            ("D", "/old.txt"),
        ]
        listed = [c async for c in view.changes()]
        assert await tree.apply(checkpoint=second.number) == listed
        assert await changes(view) == []  # (the directory holds what the view does now)
        assert on_host(host) == {"/a.txt": b"a from 2\n", "/new.txt": b"new\n"}
        assert await shown(tree) == live  # the same names and bytes
        # Now the live tree differs from the directory by the reverse of checkpoint 2.
        assert await changes(tree) == [
            ("M", "/a.txt"),
            ("A", "/d"),
            ("A", "/d/x.txt"),
            ("A", "/d/y.txt"),
            ("D", "/new.txt"),
            ("A", "/old.txt"),
        ]
        await tree.apply()  # and applying it puts the directory back
        assert on_host(host) == {
            "/a.txt": b"a\n",
            "/d": "dir",
            "/d/x.txt": b"x\n",
            "/d/y.txt": b"y\n",
            "/old.txt": b"old\n",
        }
        assert await changes(tree) == []

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_what_the_live_tree_holds_equal_is_no_longer_a_change(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree, host = make(tmp_path, kind)
        await tree.write("/a.txt", "a from 1\n")
        await tree.write("/d/z.txt", "z\n")
        await tree.checkpoint()
        await tree.write("/later.txt", "later\n")
        await tree.write("/a.txt", "a later\n")
        live = await shown(tree)
        applied = await tree.apply(["/d"], checkpoint=1)  # PATH limits it, as for the tree
        assert [c.path for c in applied] == ["/d/z.txt"]
        assert (host / "d" / "z.txt").read_text() == "z\n"
        assert (host / "a.txt").read_text() == "a\n"
        await tree.apply(checkpoint=1)
        assert (host / "a.txt").read_text() == "a from 1\n"
        assert await shown(tree) == live
        assert await changes(tree) == [("M", "/a.txt"), ("A", "/later.txt")]
        assert await tree.apply(checkpoint=1) == []  # nothing of 1 is left to write

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_conflict_is_judged_by_what_the_checkpoint_shadowed(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree, host = make(tmp_path, kind)
        await tree.write("/a.txt", "a from 1\n")
        await tree.write("/new.txt", "new\n")
        await tree.checkpoint()
        await tree.rewind(1)
        (host / "a.txt").write_text("changed on the host\n")
        (host / "new.txt").write_text("made on the host\n")
        with pytest.raises(vfs.CowConflictError) as raised:
            await tree.apply(checkpoint=1)
        assert str(raised.value) == (
            "conflict: /a.txt changed in the lower tree since it was copied up"
        )
        assert raised.value.paths == ("/a.txt", "/new.txt")
        assert (host / "a.txt").read_text() == "changed on the host\n"  # nothing written
        assert (host / "new.txt").read_text() == "made on the host\n"
        assert await tree.read("/a.txt") == "a from 1\n"

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_checkpoint_is_refused(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree, host = make(tmp_path, kind)
        await tree.write("/a.txt", "mine\n")
        with pytest.raises(vfs.CheckpointNotFoundError) as raised:
            await tree.apply(checkpoint=3)
        assert str(raised.value) == "no checkpoint 3"
        with pytest.raises(vfs.CheckpointNotFoundError):
            await tree.checkpoint_view(3)
        assert (host / "a.txt").read_text() == "a\n"

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_writing_a_view_changes_neither_the_tree_nor_the_checkpoint(
    tmp_path: Path, kind: str
) -> None:
    async def body() -> None:
        tree, host = make(tmp_path, kind)
        await tree.write("/a.txt", "one\n")
        await tree.checkpoint()
        view = await tree.checkpoint_view(1)
        await view.write("/a.txt", "through the view\n")
        assert await tree.read("/a.txt") == "one\n"
        assert await (await tree.checkpoint_view(1)).read("/a.txt") == "one\n"
        await tree.apply(checkpoint=1)
        assert (host / "a.txt").read_text() == "one\n"

    run("trio", body)
