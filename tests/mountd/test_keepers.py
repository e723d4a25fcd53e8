"""Keepers around real tree changes, on a real temp_fs and inode table, without a mount."""

from __future__ import annotations

import contextlib
import errno

import pytest
import trio

import vfs
from mountd._inodes import InodeTable, Node
from mountd._keepers import Keepers


async def _known(tree: vfs.PosixFileSystem, table: InodeTable, name: str, text: str) -> Node:
    await tree.write(f"/{name}", text)
    return table.remember(table.root, name, await tree.lstat(f"/{name}"))


def test_a_file_renamed_over_stays_readable_through_its_keeper_until_forgotten() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        old = await _known(tree, table, "f", "old")
        await tree.write("/g", "new")
        async with keepers.keeping(table.root, "f", "/f", keeper=True, attributes=False):
            await tree.rename("/g", "/f")
        table.detach_name(table.root, "f")
        kept = keepers.file_for(old, write=False)
        assert kept is not None and await kept.read(0, 10) == b"old"
        assert keepers.file_for(old, write=True) is None  # the mount never wrote it
        assert old.opens == 1 and table.find(old.ino) is old  # pinned by its keeper
        await keepers.release_if_unused(old)
        assert keepers.holds(old)  # the kernel still knows the inode
        table.forget(old.ino, 1)
        await keepers.release_if_unused(old)
        assert not keepers.holds(old) and table.find(old.ino) is None
        assert keepers.files() == []

    trio.run(main)


def test_a_file_the_mount_wrote_keeps_a_writable_keeper() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        node = await _known(tree, table, "tmp", "")
        keepers.wrote(node)
        async with keepers.keeping(table.root, "tmp", "/tmp", keeper=True, attributes=True):
            await tree.unlink("/tmp")
        kept = keepers.file_for(node, write=True)
        assert kept is not None
        await kept.write(0, b"after the unlink")
        assert await kept.read(0, 100) == b"after the unlink"
        assert keepers.files() == [kept]

    trio.run(main)


def test_a_change_that_fails_keeps_nothing() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        node = await _known(tree, table, "f", "f")
        await tree.write("/g", "g")
        with pytest.raises(FileExistsError):
            async with keepers.keeping(table.root, "f", "/f", keeper=True, attributes=False):
                await tree.rename("/g", "/f", noreplace=True)
        assert not keepers.holds(node) and node.opens == 0

    trio.run(main)


def test_only_a_file_the_kernel_knows_gets_a_keeper() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        await tree.mkdir("/d")
        directory = table.remember(table.root, "d", await tree.lstat("/d"))
        unknown = table.child(table.root, "u", await tree.lstat("/d"))  # no lookup counted
        for name in ("d", "u", "missing"):
            async with keepers.keeping(table.root, name, f"/{name}", keeper=True, attributes=False):
                pass
        assert not keepers.holds(directory) and not keepers.holds(unknown)
        assert keepers.files() == []

    trio.run(main)


def test_without_a_keeper_an_open_node_learns_what_it_will_answer_when_detached() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        node = await _known(tree, table, "f", "1")
        table.pin(node)  # an open handle
        await tree.write("/f", "grown")
        async with keepers.keeping(table.root, "f", "/f", keeper=False, attributes=True):
            await tree.unlink("/f")
        assert node.info is not None and node.info.size == 5
        assert not keepers.holds(node)

    trio.run(main)


def test_keepers_stop_at_their_limit_and_the_change_goes_ahead() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table, limit=2)
        nodes = [await _known(tree, table, f"f{n}", str(n)) for n in range(4)]
        for n in range(4):
            async with keepers.keeping(
                table.root, f"f{n}", f"/f{n}", keeper=True, attributes=False
            ):
                await tree.unlink(f"/f{n}")
        assert [keepers.holds(node) for node in nodes] == [True, True, False, False]
        assert len(keepers.files()) == 2

    trio.run(main)


def test_one_change_taking_two_names_of_a_file_opens_one_keeper() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        node = await _known(tree, table, "a", "shared")
        await tree.link("/a", "/b")
        table.add_name(node, table.root, "b")  # a hard link made through the mount
        async with contextlib.AsyncExitStack() as stack:
            for name in ("a", "b"):
                keeping = keepers.keeping(
                    table.root, name, f"/{name}", keeper=True, attributes=False
                )
                await stack.enter_async_context(keeping)
            await tree.unlink("/a")
            await tree.unlink("/b")
        assert keepers.holds(node) and len(keepers.files()) == 1
        assert node.opens == 1  # one pin: nothing leaked

    trio.run(main)


def test_a_keeper_that_finds_no_descriptor_left_is_skipped() -> None:
    async def main() -> None:
        tree, table = vfs.temp_fs(), InodeTable()
        keepers = Keepers(tree, table)
        node = await _known(tree, table, "f", "f")
        real_open = tree.open

        async def out_of_descriptors(path: str, **kwargs: object) -> vfs.OpenFile:
            raise OSError(errno.EMFILE, "Too many open files")

        tree.open = out_of_descriptors  # type: ignore[method-assign]
        async with keepers.keeping(table.root, "f", "/f", keeper=True, attributes=False):
            await tree.unlink("/f")
        tree.open = real_open  # type: ignore[method-assign]
        assert not keepers.holds(node) and keepers.files() == []

    trio.run(main)
