"""The created-file slot's decisions, on real temp_fs files and inode nodes, without a mount."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import vfs
from mountd._created import CreatedFile
from mountd._inodes import InodeTable, Node


async def _created(
    tree: vfs.PosixFileSystem, table: InodeTable, name: str
) -> tuple[Node, vfs.OpenFile]:
    file = await tree.open(f"/{name}", write=True, create=True)
    node = table.remember(table.root, name, await tree.lstat(f"/{name}"))
    return node, file


@pytest.mark.parametrize(
    ("op", "same_inode", "lets_go"),
    [
        ("write", True, False),
        ("write", False, False),  # a WRITE of another file leaves it held
        ("setattr", True, False),  # tar sets the times of the file it just wrote
        ("setattr", False, True),
        ("mkdir", True, True),
        ("create", False, True),
        ("unlink", False, True),
        ("fsync", True, True),
    ],
)
def test_which_changing_requests_let_go_of_the_held_file(
    op: str, same_inode: bool, lets_go: bool
) -> None:
    async def main() -> None:
        tree, table, slot = vfs.temp_fs(), InodeTable(), CreatedFile()
        assert not slot.lets_go_before(op, 2)  # nothing held: nothing to let go of
        node, file = await _created(tree, table, "f")
        slot.hold(node, file)
        assert slot.lets_go_before(op, node.ino if same_inode else node.ino + 1) is lets_go

    trio.run(main)


def test_a_file_let_go_of_unborrowed_is_handed_over_to_be_closed() -> None:
    async def main() -> None:
        tree, table, slot = vfs.temp_fs(), InodeTable(), CreatedFile()
        node, file = await _created(tree, table, "f")
        assert slot.hold(node, file) is None
        held = slot.let_go()
        assert held is not None and held.file is file and held.detached
        assert slot.held is None and slot.let_go() is None

    trio.run(main)


def test_a_file_let_go_of_while_borrowed_is_closed_by_its_last_borrower(tmp_path: Path) -> None:
    async def main() -> None:
        tree, table, slot = vfs.dir_fs(str(tmp_path)), InodeTable(), CreatedFile()
        node, file = await _created(tree, table, "f")
        slot.hold(node, file)
        first, second = slot.borrow(node.ino), slot.borrow(node.ino)
        assert first is not None and first is second and first.users == 2
        assert slot.let_go() is None  # in use: not handed over
        await first.file.write(0, b"x")
        await first.give_back()
        assert first.users == 1
        await first.file.write(1, b"y")  # still open for the second borrower
        await first.give_back()
        assert first.users == 0
        with pytest.raises(OSError, match="bad file descriptor"):
            await first.file.write(2, b"z")  # closed
        assert (tmp_path / "f").read_bytes() == b"xy"

    trio.run(main)


def test_a_write_of_another_inode_or_after_a_change_elsewhere_opens_by_name() -> None:
    async def main() -> None:
        tree, table, slot = vfs.temp_fs(), InodeTable(), CreatedFile()
        node, file = await _created(tree, table, "f")
        slot.hold(node, file)
        assert slot.borrow(node.ino + 1) is None
        assert not slot.holds_stale()
        slot.changed_elsewhere()
        assert slot.stale and slot.holds_stale() and slot.borrow(node.ino) is None
        other, other_file = await _created(tree, table, "g")
        previous = slot.hold(other, other_file)  # a CREATE that raced the first one's
        assert previous is not None and previous.file is file
        assert not slot.stale and slot.borrow(other.ino) is not None

    trio.run(main)


def test_the_held_file_is_let_go_of_once_the_kernel_forgets_its_inode() -> None:
    async def main() -> None:
        tree, table, slot = vfs.temp_fs(), InodeTable(), CreatedFile()
        node, file = await _created(tree, table, "f")
        slot.hold(node, file)
        assert not slot.forgotten(node.ino)  # the kernel still holds it
        table.forget(node.ino, 1)
        assert slot.forgotten(node.ino) and not slot.forgotten(node.ino + 1)
        assert slot.at_unmount() is file and slot.held is None

    trio.run(main)
