"""The inode table without a mount: numbering, lookup counts, renames, detached inodes."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mountd._inodes import OWN_INO_BASE, ROOT_INODE, InodeTable, Node, child_path, shown_ino
from vfs import FileInfo

FILE = FileInfo("file", size=3)
DIR = FileInfo("directory")


def test_root_is_inode_1_at_slash() -> None:
    table = InodeTable()
    assert table.root.ino == ROOT_INODE == 1
    assert table.path(table.root) == "/"
    assert table.resolve("/") is table.root
    assert table.find(1) is table.root
    assert len(table) == 1


def test_a_path_keeps_its_number_while_the_kernel_holds_it() -> None:
    table = InodeTable()
    a = table.remember(table.root, "a", DIR)
    again = table.remember(table.root, "a", DIR)
    assert again is a
    assert a.lookups == 2
    b = table.remember(a, "b.txt", FILE)
    assert table.path(b) == "/a/b.txt"
    assert table.resolve("/a/b.txt") is b
    assert child_path(table, a, "c") == "/a/c"


def test_stat_shows_the_tree_number_else_one_of_the_mount_s_own() -> None:
    table = InodeTable()
    host = table.remember(table.root, "host", FileInfo("file", ino=1234))
    new = table.remember(table.root, "new", FILE)
    huge = table.remember(table.root, "huge", FileInfo("file", ino=OWN_INO_BASE + 5))
    assert shown_ino(host, host.info) == 1234
    assert shown_ino(new, new.info) == OWN_INO_BASE + new.ino
    assert shown_ino(huge, huge.info) == OWN_INO_BASE + huge.ino  # never in the mount's range
    # A tree that says nothing now (an open file's stat) leaves the number as it was; one
    # that says another (the file replaced on the host) moves it.
    assert shown_ino(host, FILE) == 1234
    assert shown_ino(host, FileInfo("file", ino=99)) == 99
    assert shown_ino(new, FILE) == OWN_INO_BASE + new.ino
    assert shown_ino(table.root, None) == OWN_INO_BASE + ROOT_INODE


def test_forget_drops_a_node_and_numbers_are_never_reused() -> None:
    table = InodeTable()
    a = table.remember(table.root, "a", FILE)
    table.forget(a.ino, 1)
    assert table.find(a.ino) is None
    assert table.resolve("/a") is None
    again = table.remember(table.root, "a", FILE)
    assert again.ino > a.ino
    assert len(table) == 2


def test_a_parent_lives_while_it_has_children() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    f = table.remember(d, "f", FILE)
    table.forget(d.ino, 1)  # the kernel may forget a parent before its child
    assert table.find(d.ino) is d
    assert table.path(f) == "/d/f"
    table.forget(f.ino, 1)
    assert table.find(f.ino) is None
    assert table.find(d.ino) is None  # dropped in cascade
    assert len(table) == 1


def test_a_rename_over_a_parents_only_child_keeps_the_parent() -> None:
    """Found by the state machine: the new parent, kept only by the child a rename displaces,
    must not be dropped before the moved node arrives in it."""
    table = InodeTable()
    a = table.remember(table.root, "a", DIR)
    b = table.remember(a, "b", DIR)
    table.forget(a.ino, 1)
    moved = table.remember(b, "f", FILE)
    table.move(b, "f", a, "b")
    assert table.path(moved) == "/a/b"
    assert table.resolve("/a/b") is moved
    assert table.path(b) is None


def test_forget_more_than_looked_up_is_clamped_and_unknown_is_ignored() -> None:
    table = InodeTable()
    a = table.remember(table.root, "a", FILE)
    table.forget(a.ino, 5)
    assert table.find(a.ino) is None
    table.forget(12345, 1)
    table.forget(ROOT_INODE, 1)  # the root never goes
    assert table.find(ROOT_INODE) is table.root


def test_rename_moves_the_subtree() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    sub = table.remember(d, "sub", DIR)
    leaf = table.remember(sub, "leaf", FILE)
    e = table.remember(table.root, "e", DIR)
    table.move(table.root, "d", e, "moved")
    assert table.path(leaf) == "/e/moved/sub/leaf"
    assert table.resolve("/d") is None
    assert table.resolve("/e/moved/sub/leaf") is leaf
    assert d.ino == table.resolve("/e/moved").ino  # type: ignore[union-attr]


def test_rename_over_detaches_the_replaced_node() -> None:
    table = InodeTable()
    a = table.remember(table.root, "a", FILE)
    b = table.remember(table.root, "b", FILE)
    table.move(table.root, "a", table.root, "b")
    assert table.resolve("/b") is a
    assert table.path(b) is None  # detached, but the kernel still holds it
    assert table.find(b.ino) is b
    table.forget(b.ino, 1)
    assert table.find(b.ino) is None


def test_exchange_swaps_two_names() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    f = table.remember(table.root, "f", FILE)
    inner = table.remember(d, "inner", FILE)
    table.exchange(table.root, "d", table.root, "f")
    assert table.resolve("/f") is d
    assert table.resolve("/d") is f
    assert table.path(inner) == "/f/inner"


def test_exchange_with_an_unknown_name() -> None:
    table = InodeTable()
    f = table.remember(table.root, "f", FILE)
    table.exchange(table.root, "f", table.root, "g")
    assert table.resolve("/g") is f
    assert table.resolve("/f") is None


def test_an_open_handle_keeps_an_unlinked_node() -> None:
    table = InodeTable()
    f = table.remember(table.root, "f", FILE)
    table.pin(f)
    table.forget(f.ino, 1)
    assert table.find(f.ino) is f  # still open
    detached = table.detach_name(table.root, "f")
    assert detached is f
    assert table.path(f) is None
    assert f.info == FILE  # what getattr on the open descriptor answers
    table.unpin(f)
    assert table.find(f.ino) is None


def test_a_detached_directory_takes_its_subtree_with_it() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    leaf = table.remember(d, "leaf", FILE)
    table.detach(d)
    assert table.path(leaf) is None
    assert table.resolve("/d") is None
    fresh = table.remember(table.root, "d", DIR)
    assert fresh is not d and fresh.ino > leaf.ino
    table.forget(d.ino, 1)
    assert table.find(d.ino) is d  # its child still needs it
    table.forget(leaf.ino, 1)
    assert table.find(d.ino) is None and table.find(leaf.ino) is None


def test_a_kind_change_gets_a_new_number() -> None:
    table = InodeTable()
    a = table.remember(table.root, "a", FILE)
    b = table.remember(table.root, "a", DIR)
    assert b is not a and b.ino > a.ino
    assert table.path(a) is None
    assert table.find(a.ino) is a  # the kernel still holds the old one


def test_readdirplus_entries_count_only_when_accepted() -> None:
    table = InodeTable()
    offered = table.child(table.root, "x", FILE)
    assert offered.lookups == 0
    table.discard_if_unused(offered)  # the kernel's buffer was full
    assert table.find(offered.ino) is None
    taken = table.child(table.root, "y", FILE)
    table.ref(taken)
    table.discard_if_unused(taken)
    assert table.find(taken.ino) is taken


class TableMachine(RuleBasedStateMachine):
    """Random lookups, forgets, opens, renames and unlinks keep the table's invariants."""

    NAMES = st.sampled_from(["a", "b", "c"])

    def __init__(self) -> None:
        super().__init__()
        self.table = InodeTable()
        self.seen: set[int] = {ROOT_INODE}
        self.max_ino = ROOT_INODE
        self.pins: list[Node] = []

    def _dirs(self) -> list[Node]:
        return [n for n in self.table if n.info is None or n.info.kind == "directory"]

    def _attached(self) -> list[Node]:
        return [n for n in self.table if n is not self.table.root and self.table.is_attached(n)]

    @rule(data=st.data(), name=NAMES, kind=st.sampled_from([FILE, DIR]))
    def lookup(self, data: st.DataObject, name: str, kind: FileInfo) -> None:
        parents = [d for d in self._dirs() if self.table.is_attached(d)]
        parent = data.draw(st.sampled_from(parents))
        node = self.table.remember(parent, name, kind)
        if node.ino not in self.seen:
            assert node.ino > self.max_ino, "inode numbers are never reused"
            self.seen.add(node.ino)
            self.max_ino = node.ino

    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        held = [n for n in self.table if n.lookups > 0 and n is not self.table.root]
        if held:
            node = data.draw(st.sampled_from(held))
            self.table.forget(node.ino, data.draw(st.integers(1, node.lookups)))

    @rule(data=st.data())
    def open_close(self, data: st.DataObject) -> None:
        if self.pins and data.draw(st.booleans()):
            self.table.unpin(self.pins.pop())
            return
        held = [n for n in self.table if n.lookups > 0 and n is not self.table.root]
        if held:
            node = data.draw(st.sampled_from(held))
            self.table.pin(node)
            self.pins.append(node)

    @rule(data=st.data(), name=NAMES)
    def rename(self, data: st.DataObject, name: str) -> None:
        nodes = self._attached()
        if not nodes:
            return
        node = data.draw(st.sampled_from(nodes))
        targets = [d for d in self._dirs() if self.table.is_attached(d)]
        target = data.draw(st.sampled_from(targets))
        # A directory cannot move into itself (the tree refuses that rename).
        probe: Node | None = target
        while probe is not None:
            if probe is node:
                return
            probe = probe.parent
        assert node.parent is not None
        self.table.move(node.parent, node.name, target, name)
        assert self.table.resolve(self.table.path(node) or "") is node

    @rule(data=st.data(), name=NAMES)
    def link(self, data: st.DataObject, name: str) -> None:
        files = [n for n in self._attached() if n.info is not None and n.info.kind == "file"]
        targets = [d for d in self._dirs() if self.table.is_attached(d)]
        if not files:
            return
        node = data.draw(st.sampled_from(files))
        target = data.draw(st.sampled_from(targets))
        if name in target.children:
            return  # the tree refuses: EEXIST
        self.table.add_name(node, target, name)
        self.table.ref(node)  # the kernel is handed the entry
        assert self.table.resolve(child_path(self.table, target, name) or "") is node

    @rule(data=st.data(), pick_other=st.booleans())
    def unlink(self, data: st.DataObject, pick_other: bool) -> None:
        nodes = self._attached()
        if nodes:
            node = data.draw(st.sampled_from(nodes))
            names = _names(node)
            parent, name = names[-1] if pick_other else names[0]
            self.table.detach_name(parent, name)
            assert parent.children.get(name) is not node
            if len(names) == 1:
                assert self.table.path(node) is None

    @invariant()
    def every_name_is_in_its_parent_and_back(self) -> None:
        for node in self.table:
            for parent, name in _names(node):
                assert parent.children.get(name) is node, (node, name)
            for name, child in node.children.items():
                assert (node, name) in _names(child), (child, name)

    @invariant()
    def nodes_live_only_while_needed(self) -> None:
        for node in self.table:
            if node is self.table.root:
                continue
            assert node.lookups > 0 or node.opens > 0 or node.children, node
            path = self.table.path(node)
            if path is not None:
                assert self.table.resolve(path) is node
            for child in node.children.values():  # names: every_name_is_in_its_parent_and_back
                assert self.table.find(child.ino) is child

    @invariant()
    def held_nodes_are_never_dropped(self) -> None:
        for node in self.pins:
            assert self.table.find(node.ino) is node


TableMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_table_machine = TableMachine.TestCase


def _names(node: Node) -> list[tuple[Node, str]]:
    first = [] if node.parent is None else [(node.parent, node.name)]
    return first + list(node.others or ())


def test_a_linked_file_keeps_one_number_under_each_name() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    a = table.remember(table.root, "a", FILE)
    table.add_name(a, d, "b")
    assert table.resolve("/d/b") is a and table.path(a) == "/a"
    table.detach_name(table.root, "a")  # the first name goes: the other takes its place
    assert table.path(a) == "/d/b" and table.resolve("/a") is None
    table.add_name(a, table.root, "c")
    c = table.remember(table.root, "x", FILE)
    table.move(table.root, "x", d, "b")  # renamed over one name: the file keeps the other
    assert table.resolve("/d/b") is c and table.path(a) == "/c" and a.others is None
    table.add_name(a, d, "e")
    table.move(table.root, "c", d, "e")  # two names of one file: nothing moves
    assert table.resolve("/c") is a and table.resolve("/d/e") is a
    table.exchange(table.root, "c", d, "e")
    assert table.resolve("/c") is a and table.resolve("/d/e") is a
    table.forget(a.ino, a.lookups)  # dropped: every name goes with it
    assert table.resolve("/c") is None and table.resolve("/d/e") is None


def test_a_linked_file_answers_a_name_that_is_still_attached() -> None:
    table = InodeTable()
    d = table.remember(table.root, "d", DIR)
    a = table.remember(d, "a", FILE)
    table.add_name(a, table.root, "b")
    table.detach(d)  # its directory replaced behind the mount: the first name went with it
    assert table.path(a) == "/b"


def test_another_name_of_a_linked_file_is_found_by_its_file_id() -> None:
    table = InodeTable()
    linked = FileInfo("file", size=3, nlink=2, file_id=77)
    a = table.remember(table.root, "a", linked)
    d = table.remember(table.root, "d", DIR)
    assert table.remember(d, "b", linked) is a  # one inode for both names
    assert table.resolve("/d/b") is a and a.lookups == 2
    assert table.remember(d, "c", FileInfo("file", size=3, nlink=2, file_id=78)) is not a
    table.forget(a.ino, 2)  # dropped: the id no longer leads to it
    fresh = table.remember(table.root, "e", linked)
    assert fresh is not a and fresh.ino > a.ino
