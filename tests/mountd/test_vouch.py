"""What the mount vouches for, judged by its generation, on real inode tables without a mount."""

from __future__ import annotations

import vfs
from mountd._inodes import InodeTable
from mountd._vouch import Generation, Vouching


def _table() -> tuple[InodeTable, Generation, Vouching]:
    generation = Generation()
    vouched = Vouching(generation, enabled=True)
    return InodeTable(dropped=vouched.dropped), generation, vouched


def test_an_answer_is_vouched_for_only_if_nothing_changed_since_the_question() -> None:
    table, generation, vouched = _table()
    asked_at = generation.now
    info = vfs.FileInfo("file", size=1)
    node = table.remember(table.root, "f", info)
    vouched.vouch(node, info, asked_at)
    assert vouched.vouches_for(node)
    later = vfs.FileInfo("file", size=2)
    asked_at = generation.now
    generation.move()  # a changing request ran while the tree was asked
    node.info = later
    vouched.vouch(node, later, asked_at)
    assert not vouched.vouches_for(node)


def test_a_listing_knows_only_what_each_node_still_holds() -> None:
    table, generation, vouched = _table()
    directory = table.remember(table.root, "d", vfs.FileInfo("directory"))
    infos = {name: vfs.FileInfo("file", size=len(name)) for name in ("a", "bb", "ccc", "dddd")}
    nodes = {name: table.remember(directory, name, info) for name, info in infos.items()}
    for name, node in nodes.items():
        vouched.vouch(node, infos[name], generation.now)
    nodes["a"].info = vfs.FileInfo("file", size=9)  # reassigned: not what was vouched for
    vouched.unvouch(nodes["bb"])  # a write through the mount
    vouched.unvouch_name(directory, "ccc")  # an unlink or rename of the name
    vouched.unvouch_name(directory, "unknown")
    assert vouched.known(directory) == {"dddd": infos["dddd"]}
    vouched.forget_all()  # a change reported from elsewhere
    assert vouched.known(directory) == {} and len(vouched) == 0


def test_what_is_vouched_for_lives_as_long_as_the_node() -> None:
    table, generation, vouched = _table()
    info = vfs.FileInfo("file", size=1)
    node = table.remember(table.root, "f", info)
    vouched.vouch(node, info, generation.now)
    assert len(vouched) == 1
    table.forget(node.ino, 1)
    assert table.find(node.ino) is None and len(vouched) == 0


def test_a_mount_whose_listings_cannot_reuse_vouches_for_nothing() -> None:
    generation = Generation()
    vouched = Vouching(generation, enabled=False)
    table = InodeTable(dropped=vouched.dropped)
    info = vfs.FileInfo("file", size=1)
    node = table.remember(table.root, "f", info)
    vouched.vouch(node, info, generation.now)
    assert not vouched.vouches_for(node) and vouched.known(table.root) == {}
