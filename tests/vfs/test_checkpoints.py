"""Checkpoints of temp_fs and cow_fs: sharing, what a rewind tells and keeps, who has them."""

from __future__ import annotations

from pathlib import Path

import pytest

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._frozen import page_space
from vfs._pages import PAGE_SIZE
from vfs.turns import RootContext, Session, turn_root

from .eightverb import exactly, run
from .test_conformance import write_host_tree

SEED: dict[str, str | bytes] = {"/a.txt": "a\n", "/d/b.txt": "b\n", "/e/c.txt": "c\n"}


def trees(tmp_path: Path) -> dict[str, vfs.FileSystem]:
    host = write_host_tree(tmp_path / "lower", SEED)
    (tmp_path / "upper").mkdir()
    return {
        "temp": vfs.temp_fs(SEED),
        "cow-dir": vfs.cow_fs(vfs.dir_fs(str(host), read_only=True)),
        "cow-temp": vfs.cow_fs(vfs.temp_fs(SEED)),
        "cow-durable": vfs.cow_fs(
            vfs.dir_fs(str(host), read_only=True), vfs.dir_fs(str(tmp_path / "upper"))
        ),
    }


KINDS = ("temp", "cow-dir", "cow-temp", "cow-durable")


@pytest.mark.parametrize("kind", KINDS)
def test_a_descriptor_held_across_a_rewind_keeps_its_file(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints) and isinstance(tree, vfs.PosixFileSystem)
        await tree.checkpoint()
        await tree.write("/a.txt", "changed\n")
        held = await tree.open("/a.txt", write=True)
        await tree.rewind(1)
        assert await tree.read("/a.txt") == "a\n"
        assert await held.read(0, 100) == b"changed\n"
        await held.write(0, b"C")  # into the old file, as after a rename over it
        await held.close()
        assert await tree.read("/a.txt") == "a\n"

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_rewind_reports_exactly_what_changed(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints) and isinstance(tree, vfs.PosixFileSystem)
        await tree.write("/d/keep.txt", "keep\n")
        await tree.checkpoint()
        await tree.write("/d/b.txt", "B\n")
        await tree.write("/new/x.txt", "x\n")
        await tree.delete("/e/c.txt")
        assert isinstance(tree, vfs.Watchable)
        seen: list[vfs.Change] = []
        tree.watch(seen.append)
        await tree.rewind(1)
        entries = {change.path for change in seen if change.kind == "entry"}
        assert entries == {"/d/b.txt", "/new", "/e/c.txt"}
        assert not any(change.path == "/d/keep.txt" for change in seen)

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_rewind_is_undone_by_rewinding_to_the_state_it_recorded(
    tmp_path: Path, kind: str
) -> None:
    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints)
        first = await tree.checkpoint("start")
        await tree.write("/a.txt", "work\n")
        await tree.rewind(first.number)
        records = await tree.checkpoints()
        assert [(r.number, r.label) for r in records] == [(1, "start"), (2, "before rewind to 1")]
        assert records[1].summary == vfs.Summary(modified=1, bytes=5)
        await tree.rewind(2)
        assert await tree.read("/a.txt") == "work\n"
        assert len(await tree.checkpoints()) == 2  # nothing changed since 2: nothing recorded

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_summary_counts_from_the_state_rewound_to(tmp_path: Path, kind: str) -> None:
    """After a rewind the tree grew from the checkpoint rewound to, in every tree: the next
    checkpoint counts what changed since that one, not since the state the rewind left."""

    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints)
        await tree.checkpoint()
        await tree.write("/new.txt", "new\n")
        await tree.rewind(1)
        before = (await tree.checkpoints())[-1]
        assert (before.number, before.label) == (2, "before rewind to 1")
        assert before.summary == vfs.Summary(added=1, bytes=4)
        third = await tree.checkpoint()
        assert third.summary == vfs.Summary()
        await tree.write("/a.txt", "changed\n")
        fourth = await tree.checkpoint()
        assert fourth.summary == vfs.Summary(modified=1, bytes=8)

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_rewind_replaces_a_file_written_with_the_bytes_it_had(tmp_path: Path, kind: str) -> None:
    """``rewind_replaces`` names it (a mount keeps it for the descriptors held on it), though
    ``checkpoint_changes`` sees no change there; what did not change is not named."""

    async def body() -> None:
        tree = turn_root(trees(tmp_path)[kind])  # forwarded, as the default tree's
        await tree.checkpoint()
        await tree.write("/a.txt", "a\n")
        await tree.write("/d/new.txt", "new\n")
        assert [c.path for c in await tree.checkpoint_changes(1)] == ["/d/new.txt"]
        replaces = await tree.rewind_replaces(1)
        assert {"/a.txt", "/d/new.txt"} <= set(replaces)
        assert "/d/b.txt" not in replaces and "/e/c.txt" not in replaces
        with pytest.raises(vfs.CheckpointNotFoundError):
            await tree.rewind_replaces(7)

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_checkpoint_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints)
        with pytest.raises(vfs.CheckpointNotFoundError, match=exactly("no checkpoint 9")):
            await tree.rewind(9)
        with pytest.raises(vfs.CheckpointNotFoundError, match=exactly("no checkpoint 9")):
            await tree.fork(9)
        with pytest.raises(vfs.CheckpointNotFoundError, match=exactly("no checkpoint 9")):
            await tree.checkpoint_diff(9)

    run("trio", body)


@pytest.mark.parametrize("kind", KINDS)
def test_diff_is_the_git_style_diff_of_the_changes(tmp_path: Path, kind: str) -> None:
    async def body() -> None:
        tree = trees(tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints)
        await tree.checkpoint()
        await tree.write("/a.txt", "a\nmore\n")
        await tree.checkpoint()
        assert await tree.checkpoint_changes(1, 2) == [vfs.TreeChange("/a.txt", "modified")]
        assert await tree.checkpoint_diff(1) == (
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n a\n+more\n"
        )
        assert await tree.checkpoint_changes(2) == []

    run("trio", body)


def test_a_one_byte_change_to_a_large_file_costs_one_page() -> None:
    async def body() -> None:
        tree = vfs.temp_fs({"/big": bytes(range(256)) * 4096})  # 1 MiB, 256 pages
        await tree.checkpoint()
        file = await tree.open("/big", write=True)
        await file.write(500_000, b"!")
        await file.close()
        await tree.checkpoint()
        states = tree._history.states()
        assert page_space(states) == (1 << 20) + PAGE_SIZE
        # The untouched directories are the same frozen nodes in both checkpoints.
        tree2 = vfs.temp_fs(SEED)
        await tree2.checkpoint()
        await tree2.write("/d/b.txt", "B\n")
        await tree2.checkpoint()
        first, second = tree2._history.states()
        assert first.children["e"] is second.children["e"]
        assert first.children["a.txt"] is second.children["a.txt"]
        assert first.children["d"] is not second.children["d"]

    run("trio", body)


def test_hard_links_come_back_as_one_file() -> None:
    async def body() -> None:
        tree = vfs.temp_fs(SEED)
        await tree.link("/a.txt", "/d/again.txt")
        await tree.checkpoint()
        await tree.unlink("/d/again.txt")
        await tree.write("/a.txt", "new\n")
        await tree.rewind(1)
        assert (await tree.lstat("/d/again.txt")).nlink == 2
        file = await tree.open("/d/again.txt", write=True)
        await file.write(0, b"A")
        await file.close()
        assert await tree.read("/a.txt") == "A\n"
        forked = await tree.fork(1)
        assert (await forked.lstat("/a.txt")).nlink == 2

    run("trio", body)


def test_a_fork_is_independent_and_starts_at_its_checkpoint(tmp_path: Path) -> None:
    async def body() -> None:
        host = write_host_tree(tmp_path / "lower", SEED)
        tree = vfs.cow_fs(vfs.dir_fs(str(host), read_only=True))
        assert isinstance(tree, vfs.Checkpoints)
        await tree.write("/a.txt", "one\n")
        await tree.checkpoint()
        await tree.write("/a.txt", "two\n")
        forked = await tree.fork(1)
        assert isinstance(forked, vfs.CowFileSystem)
        assert await forked.read("/a.txt") == "one\n"
        await forked.write("/d/b.txt", "fork\n")
        assert await tree.read("/d/b.txt") == "b\n"
        assert await tree.read("/a.txt") == "two\n"
        assert [c.path async for c in forked.changes()] == ["/a.txt", "/d/b.txt"]
        assert (host / "a.txt").read_text() == "a\n"

    run("trio", body)


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "durable"])
def test_a_rewind_never_touches_the_lower_host_directory(tmp_path: Path, durable: bool) -> None:
    async def body() -> None:
        host = write_host_tree(tmp_path / "lower", SEED)
        (tmp_path / "upper").mkdir()
        upper = vfs.dir_fs(str(tmp_path / "upper")) if durable else None
        tree = vfs.cow_fs(vfs.dir_fs(str(host)), upper)
        assert isinstance(tree, vfs.Checkpoints)
        await tree.checkpoint()
        await tree.write("/a.txt", "changed\n")
        await tree.delete("/d/b.txt")
        await tree.rename("/e", "/moved")
        await tree.checkpoint()
        before = {p: p.read_bytes() for p in host.rglob("*") if p.is_file()}
        await tree.rewind(1)
        assert await tree.read("/d/b.txt") == "b\n"
        assert {(c.path, c.kind) for c in await tree.checkpoint_changes(1, 2)} == {
            ("/a.txt", "modified"),
            ("/d/b.txt", "deleted"),
            ("/e", "deleted"),
            ("/e/c.txt", "deleted"),
            ("/moved", "added"),
            ("/moved/c.txt", "added"),
        }
        await tree.rewind(2)
        assert await tree.read("/moved/c.txt") == "c\n"
        assert {p: p.read_bytes() for p in host.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in host.iterdir()) == ["a.txt", "d", "e"]

    run("trio", body)


def test_a_rewind_is_in_the_audit_log() -> None:
    async def body() -> None:
        log = AuditLog(keep=16)
        tree = audited_fs(vfs.temp_fs(SEED), log)
        assert isinstance(tree, vfs.Checkpoints)
        await tree.checkpoint("start")
        await tree.write("/a.txt", "x")
        await tree.rewind(1)
        assert [(e.op, e.path, e.detail) for e in log] == [
            ("checkpoint", "/", "label=start"),
            ("write", "/a.txt", None),
            ("rewind", "/", "to=1"),
        ]

    run("trio", body)


def test_the_default_tree_checkpoints_its_root_and_not_its_scratch() -> None:
    async def body() -> None:
        root = turn_root(vfs.union_fs({"/": vfs.cow_fs(vfs.temp_fs(SEED)), "/tmp": vfs.temp_fs()}))
        assert isinstance(root, vfs.Checkpoints)
        await root.checkpoint()
        await root.write("/a.txt", "x")
        await root.write("/tmp/scratch", "s")
        assert await root.checkpoint_changes(1) == [vfs.TreeChange("/a.txt", "modified")]
        await root.rewind(1)
        assert await root.read("/a.txt") == "a\n"
        assert await root.read("/tmp/scratch") == "s"

    run("trio", body)


def test_a_cow_has_checkpoints_and_a_host_directory_has_none(tmp_path: Path) -> None:
    (tmp_path / "upper").mkdir()
    lower = vfs.temp_fs(SEED)
    assert isinstance(vfs.cow_fs(lower), vfs.Checkpoints)
    assert isinstance(vfs.cow_fs(lower, vfs.dir_fs(str(tmp_path / "upper"))), vfs.Checkpoints)
    assert not isinstance(vfs.dir_fs(str(tmp_path)), vfs.Checkpoints)


def test_prune_keeps_the_labelled_and_the_last() -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        for number in range(1, 7):
            await tree.write("/f", str(number))
            await tree.checkpoint("two" if number == 2 else None)
        assert await tree.prune_checkpoints(2) == [1, 3, 4]
        assert [r.number for r in await tree.checkpoints()] == [2, 5, 6]
        await tree.rewind(2)
        assert await tree.read("/f") == "2"

    run("trio", body)


def test_a_turn_end_takes_a_checkpoint_by_default(tmp_path: Path) -> None:
    async def body() -> None:
        tree = vfs.cow_fs(vfs.temp_fs(SEED))
        assert isinstance(tree, vfs.Checkpoints)
        session = Session(tree, RootContext("s"), cwd=tmp_path)
        async with session.turn() as turn:
            await turn.root.write("/a.txt", "one\n")
        assert turn.checkpoint is not None and turn.checkpoint.turn == 1
        root = turn_root(tree, keep_checkpoints=1)
        for _ in range(3):
            turn = await root.begin_turn()
            await root.write("/a.txt", f"turn {turn.number}\n")
            await root.end_turn()
            assert turn.checkpoint is not None and turn.checkpoint.turn == turn.number
        assert [(c.number, c.turn) for c in await tree.checkpoints()] == [(4, 3)]  # kept 1
        quiet = turn_root(vfs.temp_fs(), checkpoint_turns=False)
        await quiet.begin_turn()
        ended = await quiet.end_turn()
        assert ended.checkpoint is None and await quiet.checkpoints() == []  # type: ignore[attr-defined]

    run("trio", body)


@pytest.mark.parametrize("kind", ("temp", "cow-temp", "cow-durable"))
def test_a_tree_deeper_than_python_s_recursion_limit(deep_tmp_path: Path, kind: str) -> None:
    # An agent's `mkdir d && cd d` loop: every walk of a checkpoint (freezing, comparing,
    # rewinding, thawing hard links) had recursed once per level.
    depth = 1_200

    async def body() -> None:
        tree = trees(deep_tmp_path)[kind]
        assert isinstance(tree, vfs.Checkpoints) and isinstance(tree, vfs.PosixFileSystem)
        deep = ""
        for _ in range(depth):
            deep += "/n"
            await tree.mkdir(deep)
        await tree.write(deep + "/f", "one\n")
        # (a durable cow's checkpoint misses the other names of a hard-linked file written
        # through one: not this test's subject)
        linked = kind != "cow-durable"
        if linked:
            await tree.link(deep + "/f", "/top-link")
        first = await tree.checkpoint()
        await tree.write(deep + "/f", "two\n")
        second = await tree.checkpoint()
        assert [c.path for c in await tree.checkpoint_changes(first.number)] == sorted(
            ["/top-link", deep + "/f"] if linked else [deep + "/f"]
        )
        assert "+two" in await tree.checkpoint_diff(first.number)
        await tree.rewind(first.number)
        assert await tree.read(deep + "/f") == "one\n"
        if linked:
            await tree.write("/top-link", "linked\n")  # still one file, both names
            assert await tree.read(deep + "/f") == "linked\n"
        fork = await tree.fork(second.number)
        assert await fork.read(deep + "/f") == "two\n"

    run("trio", body)
