"""A durable cow's record is saved as a journal of what changed, rewritten when it outgrows it.

Each test reopens the upper as a new process would (a fresh ``cow_fs`` over the same
directories) and compares with the tree that made the changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vfs
from vfs import _cow
from vfs._cow import cow_fs

from .eightverb import run
from .test_conformance import write_host_tree
from .test_cow import saved_record, tree_state

RESERVED = ".agentroot-cow"


def reopened(lower: Path, upper: Path) -> vfs.PosixFileSystem:
    return cow_fs(vfs.dir_fs(lower, read_only=True), vfs.dir_fs(upper))


async def review(tree: Any) -> tuple[list[Any], dict[str, Any]]:
    return [c async for c in tree.changes()], await tree_state(tree)


def record_number(upper: Path) -> int:
    return int(json.loads((upper / RESERVED / "meta.json").read_text())["journal"])


def test_removing_a_lower_tree_appends_and_rewrites_the_record_rarely(tmp_path: Path) -> None:
    files = {f"/build/d{d}/f{f}.o": "x" for d in range(30) for f in range(100)}
    lower = write_host_tree(tmp_path / "lower", files)
    upper = tmp_path / "upper"
    upper.mkdir()

    async def main() -> None:
        cow = reopened(lower, upper)
        for path in files:
            await cow.delete(path)
        # 3,000 whiteouts, each saved: the record is rewritten only as the journal outgrows it
        # (its size doubling, about), not once per change.
        assert record_number(upper) <= 8
        journal = upper / RESERVED / f"meta.journal.{record_number(upper)}"
        assert journal.stat().st_size <= max(
            _cow._JOURNAL_MIN, (upper / RESERVED / "meta.json").stat().st_size
        )
        assert await review(reopened(lower, upper)) == await review(cow)
        assert saved_record(upper).hidden >= set(files)
        assert len(os.listdir(lower / "build")) == 30  # the lower is never written

    run("trio", main)


def test_a_line_cut_short_by_a_kill_is_dropped_and_the_journal_goes_on(tmp_path: Path) -> None:
    lower = write_host_tree(tmp_path / "lower", {"/a.txt": "a", "/b.txt": "b", "/c.txt": "c"})
    upper = tmp_path / "upper"
    upper.mkdir()

    async def main() -> None:
        cow = reopened(lower, upper)
        await cow.delete("/a.txt")
        await cow.delete("/b.txt")
        before = await review(cow)
        journal = upper / RESERVED / f"meta.journal.{record_number(upper)}"
        whole = journal.read_bytes()
        with journal.open("ab") as tail:
            tail.write(b'["hidden","/c.t')  # a kill in the middle of an append
        again = reopened(lower, upper)
        assert await review(again) == before
        assert journal.read_bytes() == whole  # the cut line is gone, not built upon
        await again.delete("/c.txt")
        assert await review(reopened(lower, upper)) == await review(again)
        assert saved_record(upper).hidden == {"/a.txt", "/b.txt", "/c.txt"}

    run("trio", main)


def test_a_journal_the_record_does_not_name_is_removed_unread(tmp_path: Path) -> None:
    lower = write_host_tree(tmp_path / "lower", {"/a.txt": "a", "/b.txt": "b"})
    upper = tmp_path / "upper"
    upper.mkdir()

    async def main() -> None:
        cow = reopened(lower, upper)
        await cow.delete("/a.txt")
        before = await review(cow)
        # What a kill between a record's rewrite and the old journal's removal leaves.
        stale = upper / RESERVED / f"meta.journal.{record_number(upper) - 1}"
        stale.write_text('["hidden","/b.txt",1]\n')
        assert await review(reopened(lower, upper)) == before
        assert not stale.exists()

    run("trio", main)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["delete", "write", "rename", "mkdir", "reopen"]),
        st.sampled_from(["/a", "/b", "/d/x", "/d/y", "/d/e/z", "/n"]),
        st.sampled_from(["/a", "/b2", "/d/x2", "/n2", "/d/e/z"]),
    ),
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_any_changes_survive_any_restart(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, ops: list[Any]
) -> None:
    monkeypatch.setattr(_cow, "_JOURNAL_MIN", 256)  # rewrite the record often
    base = tmp_path_factory.mktemp("journal")
    seed = {"/a": "a", "/b": "b", "/d/x": "x", "/d/y": "y", "/d/e/z": "z"}
    lower = write_host_tree(base / "lower", seed)
    upper = base / "upper"
    upper.mkdir()

    async def main() -> None:
        live = cow_fs(vfs.dir_fs(lower, read_only=True))  # never restarted: the model
        cow = reopened(lower, upper)
        for op, path, other in ops:
            if op == "reopen":
                cow = reopened(lower, upper)
                continue
            outcomes = []
            for tree in (live, cow):
                try:
                    if op == "delete":
                        await tree.delete(path)
                    elif op == "write":
                        await tree.write(path, f"{op} {path} {other}")
                    elif op == "rename":
                        await tree.rename(path, other)
                    else:
                        await tree.mkdir(path)
                    outcomes.append(None)
                except vfs.PathError as error:
                    outcomes.append(type(error))
            assert outcomes[0] == outcomes[1]
        assert await review(reopened(lower, upper)) == await review(live)

    run("trio", main)
